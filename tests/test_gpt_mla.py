"""Chapter 15's multi-head latent attention inside chapter 13's GPT (``attention="mla"``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TOL64

from mha_course.attention.mla import LatentKVCache, MultiHeadLatentAttention
from mha_course.caches.base import kv_cache_bytes
from mha_course.gpt import GPT, GPTConfig
from mha_course.gpt.checkpoint import load_checkpoint, save_checkpoint
from mha_course.gpt.config import TrainConfig, from_dict, to_dict
from mha_course.gpt.generate import generate
from mha_course.gpt.tokenizer import CharTokenizer

TINY = dict(
    vocab_size=11,
    context_length=16,
    n_layer=2,
    n_head=4,
    n_embd=16,
    attention="mla",
    kv_latent_dim=6,
)


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, **kw})).double().eval()


@pytest.mark.parametrize("positions,rope_dim", [("learned", 0), ("none", 0), ("rope", 4)])
def test_mla_cached_decode_equals_full_forward(positions, rope_dim):
    model = tiny(positions=positions, rope_dim=rope_dim)
    assert all(isinstance(b.attn, MultiHeadLatentAttention) for b in model.blocks)
    ids = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    full = model(ids)  # (B, T, V)
    caches = model.new_caches()
    assert all(isinstance(c, LatentKVCache) for c in caches)
    parts = [model(ids[:, :5], caches=caches)]  # a prompt chunk, then one id at a time
    parts += [model(ids[:, t : t + 1], caches=caches) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, **TOL64)
    # the positions matter: a different order of the same prefix changes the last logits
    assert not torch.allclose(model(ids.flip(1))[:, -1], full[:, -1])


def test_mla_gpt_equals_its_blocks_run_by_hand():
    """The dense reference: embeddings, then each block's MLA module (non-cached, chapter 15's
    own forward) and MLP by hand, then the tied read-out."""
    model = tiny()
    ids = torch.randint(0, 11, (3, 16), generator=torch.Generator().manual_seed(2))
    x = model.wte(ids) + model.wpe.weight[:16]
    for b in model.blocks:
        x = x + b.attn(b.ln_1(x))
        x = x + b.mlp(b.ln_2(x))
    torch.testing.assert_close(model(ids), model.ln_f(x) @ model.wte.weight.T, **TOL64)


def test_mla_cache_bytes_are_the_one_formula():
    model = tiny(positions="rope", rope_dim=4)
    caches = model.new_caches()
    model(torch.zeros(3, 7, dtype=torch.long), caches=caches)
    held = sum(c.nbytes for c in caches)
    assert held == kv_cache_bytes(2, None, None, 7, 3, torch.float64, latent_dim=6, rope_dim=4)


def test_mla_generate_with_cache_equals_recomputing():
    model = tiny()
    prompt = torch.randint(0, 11, (2, 4), generator=torch.Generator().manual_seed(3))
    out = [
        generate(
            model, prompt, 30, 1.0, None, generator=torch.Generator().manual_seed(4), use_cache=c
        )
        for c in (True, False)
    ]  # 30 > context_length: the window slides
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=0)


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"attention": "mla2"}, "attention"),
        ({"kv_latent_dim": None}, "kv_latent_dim"),
        ({"kv_latent_dim": 0}, "kv_latent_dim"),
        ({"n_kv_head": 2}, "n_kv_head"),
        ({"rope_dim": 3, "positions": "rope"}, "rope_dim"),
        ({"positions": "rope"}, "rope_dim"),  # RoPE with MLA needs the decoupled part
        ({"rope_dim": 4}, "rope_dim"),  # learned positions: nothing to rotate
        ({"dropout": 0.1}, "dropout"),
        ({"attention": "mha"}, "kv_latent_dim"),  # MLA-only settings on MHA
    ],
)
def test_mla_config_errors_name_the_argument(kw, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        GPTConfig(**{**TINY, **kw})


def test_mla_refuses_what_it_cannot_do():
    model = tiny()
    with pytest.raises(ValueError, match="static"):
        model.new_caches(static=True)
    with pytest.raises(ValueError, match="need_weights"):
        model(torch.zeros(1, 4, dtype=torch.long), need_weights=True)


def test_mla_checkpoint_round_trip_and_old_configs_still_load(tmp_path):
    model = tiny().float()
    tok = CharTokenizer("abcdefghijk")
    save_checkpoint(tmp_path / "m.pt", model, TrainConfig(), tok, {"corpus_sha256": "x"})
    back = load_checkpoint(tmp_path / "m.pt", verify_corpus=False)
    assert back.config == model.config
    ids = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(back.model(ids), model(ids), rtol=2e-3, atol=2e-3)  # fp16 weights
    old = {
        k: v
        for k, v in to_dict(GPTConfig()).items()
        if k not in ("attention", "kv_latent_dim", "rope_dim")
    }  # a chapter 13 checkpoint
    assert from_dict(GPTConfig, old).attention == "mha"


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "name,changes",
    [
        ("ch13_mla.pt", {"attention": "mla", "kv_latent_dim": 96}),  # rope_dim stays 0
        ("ch13_mha_rope.pt", {"positions": "rope"}),
    ],
)
def test_shipped_runs_are_matched_to_chapter_13s_recipe(name, changes):
    """Same training recipe and steps as ch13_mha.pt; the model config differs only in ``changes``."""
    mha = load_checkpoint(ROOT / "checkpoints" / "ch13_mha.pt", verify_corpus=False)
    ckpt = load_checkpoint(ROOT / "checkpoints" / name, verify_corpus=False)
    assert ckpt.train_config == mha.train_config
    assert ckpt.meta["steps"] == mha.meta["steps"] == 2000
    assert ckpt.meta["corpus_sha256"] == mha.meta["corpus_sha256"]
    diff = {k: v for k, v in to_dict(ckpt.config).items() if to_dict(mha.config)[k] != v}
    assert diff == changes


def test_train_command_reads_the_mla_config_and_flags():
    from mha_course.cli import build_parser
    from mha_course.commands.train import resolve

    args = build_parser().parse_args(["train", "--config", str(ROOT / "configs/ch13/mla.json")])
    model, train, out, _, _ = resolve(args)
    assert (model.attention, model.kv_latent_dim, model.rope_dim, out.name) == (
        "mla",
        96,
        0,
        "ch13_mla.pt",
    )
    args = build_parser().parse_args(
        [
            "train",
            "--attention",
            "mla",
            "--kv-latent-dim",
            "8",
            "--positions",
            "rope",
            "--rope-dim",
            "4",
        ]
    )
    assert resolve(args)[0].rope_dim == 4
