"""Chapter 20: every family's tiny random model, built by ``transformers`` itself, converted
into the course's FamilyLM: same logits, same greedy tokens (with the course's caches), and
a deliberately wrong conversion fails. Nothing is downloaded."""

from __future__ import annotations

import dataclasses

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the [hf] extra (transformers) is not installed"
)

from mha_course import convert_rope_layout, rope_permutation  # noqa: E402
from mha_course.families import FAMILIES as ALL_FAMILIES  # noqa: E402
from mha_course.families import FamilyConfig, FamilyLM, config_from_hf, from_hf, greedy_generate  # noqa: E402
from mha_course.families.tiny import VOCAB, save_tiny_checkpoint, tiny_hf_config, tiny_hf_model  # noqa: E402

V = VOCAB


FAMILIES = list(ALL_FAMILIES)  # the table itself is pinned in test_families_loading.py
# transformers computes RMSNorm and the RoPE angles in float32 even for a float64 model (for
# half-precision training), so float64 agreement is bounded by float32 rounding there; GPT-2
# (LayerNorm, learned positions) has no such cast and agrees to float64 rounding.
FLOAT64_ATOL = {"gpt2": 1e-12}


def ids(L: int = 20, B: int = 2) -> torch.Tensor:
    return torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(L))


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request):
    hf = tiny_hf_model(request.param)
    return request.param, hf, from_hf(hf)


def test_logits_equal_transformers_in_float64(pair):
    family, hf, ours = pair
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(
            ours(x), hf(x).logits, rtol=0, atol=FLOAT64_ATOL.get(family, 1e-6)
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_transformers_in_float32(family):
    hf = tiny_hf_model(family, torch.float32)
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(from_hf(hf)(x), hf(x).logits, rtol=0, atol=1e-5)


def test_greedy_decoding_with_the_course_caches_equals_generate(pair):
    """16 tokens from a 4-token prompt: past the window (W = 5) of Mistral and Gemma 2."""
    family, hf, ours = pair
    prompt = ids(L=4, B=1)
    theirs = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(greedy_generate(ours, prompt, 12, hf.generation_config.eos_token_id), theirs)
    assert theirs.shape[1] > 5 + 1  # past the window W = 5 (or stopped at end-of-sequence later)


VARIANTS = [  # family options the default tiny configs leave off
    ("qwen2", {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1}),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1}),
    ("deepseek_v3", {"q_lora_rank": None}),  # DeepSeek V2-Lite: queries without a bottleneck
    ("deepseek_v3", {"rope_interleave": False}),
    ("llama", {"attention_bias": True}),
    ("qwen3", {"attention_bias": True}),
    ("llama", {"tie_word_embeddings": True}),  # Llama 3.2
]


@pytest.mark.parametrize(
    "family, changes", VARIANTS, ids=[f"{f}-{'-'.join(c)}" for f, c in VARIANTS]
)
def test_family_options_convert_too(family, changes):
    hf = tiny_hf_model(family, torch.float32, **changes)
    ours = from_hf(hf)
    if "sliding_window" in changes:  # layers from max_window_layers on are local
        assert ours.config.windows == (None, 5, 5)
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_bfloat16_logits_agree_within_a_few_rounding_steps(family):
    hf = tiny_hf_model(family, torch.bfloat16)
    x = ids()
    with torch.no_grad():
        diff = (from_hf(hf)(x).float() - hf(x).logits.float()).abs().max().item()
    assert diff <= 4 * 2**-7  # bfloat16 keeps 8 bits: one step near 1 is 2^-7


def test_a_finished_row_is_padded_as_generate_pads_it():
    hf = tiny_hf_model("llama")
    ours = from_hf(hf)
    prompt = ids(L=4)
    first = greedy_generate(ours, prompt[:1], 12)  # row 0's own continuation
    eos = int(first[0, 6])  # make row 0 finish at its third new token
    theirs = hf.generate(
        prompt, max_new_tokens=12, do_sample=False, eos_token_id=eos, pad_token_id=V - 1
    )
    mine = greedy_generate(ours, prompt, 12, eos_token_id=eos, pad_token_id=V - 1)
    assert torch.equal(mine, theirs)
    assert (mine[0, 7:] == V - 1).all()


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_a_prompt_longer_than_the_window_decodes_as_the_full_forward(family):
    """Prompt of 9 > W = 5: the ring-buffer caches after a long prefill give each step the
    argmax of the full forward on everything so far (checked against transformers' forward)."""
    hf = tiny_hf_model(family)
    ours = from_hf(hf)
    out = greedy_generate(ours, ids(L=9, B=1), 8)
    with torch.no_grad():
        full = hf(out).logits
    assert torch.equal(full[0, 8:-1].argmax(-1), out[0, 9:])


def test_cached_decoding_equals_the_full_forward(pair):
    family, _, ours = pair
    x = ids(L=12)
    caches = ours.new_caches()
    with torch.no_grad():
        steps = [ours(x[:, :5], caches)] + [ours(x[:, t : t + 1], caches) for t in range(5, 12)]
        torch.testing.assert_close(torch.cat(steps, dim=1), ours(x), rtol=0, atol=1e-12)


def with_config(model: FamilyLM, **changes) -> FamilyLM:
    """The same weights under a changed config (a deliberately wrong conversion)."""
    wrong = FamilyLM(dataclasses.replace(model.config, **changes)).to(torch.float64).eval()
    wrong.load_state_dict(model.state_dict(), strict=False)
    return wrong


@pytest.mark.parametrize(
    "family, change",
    [
        ("llama", {"rope_layout": "interleaved"}),  # the other RoPE layout
        ("deepseek_v3", {"rope_layout": "half"}),
        ("gemma2", {"final_softcap": None}),  # a missing soft-cap
        ("gemma2", {"attn_softcap": None}),
        ("gemma2", {"norm_offset": 0.0}),  # Gemma's 1 + w
        ("gemma2", {"embed_scale": False}),
        ("gemma2", {"attn_scale": None}),  # query_pre_attn_scalar (24) is not D (16)
        ("mistral", {"windows": (None, None, None)}),  # no sliding window
        ("qwen2", {"qkv_bias": False}),
        ("llama", {"mlp": "geglu_tanh"}),
        ("gemma3_text", {"local_rope_base": None}),  # one RoPE base for local and global layers
        ("gemma3_text", {"qk_norm": False}),
        ("gemma3_text", {"windows": (None, None, None)}),
        ("olmo2", {"pre_norm": True}),  # norms before the sub-layers as well
        ("olmo2", {"sandwich_norm": False}),
    ],
)
def test_a_wrong_conversion_fails(family, change):
    hf = tiny_hf_model(family)
    wrong = with_config(from_hf(hf), **change)
    x = ids()
    with torch.no_grad():
        assert (wrong(x) - hf(x).logits).abs().max() > 1e-3


def test_qwen3_needs_its_query_key_norms():
    hf = tiny_hf_model("qwen3")
    wrong = with_config(from_hf(hf), qk_norm=False)
    x = ids()
    with torch.no_grad():
        assert (wrong(x) - hf(x).logits).abs().max() > 1e-3


def test_the_chapter_12_converter_is_the_llama_conversion_permutation():
    """Meta's Llama checkpoints use the interleaved layout; transformers' conversion script
    permutes W_Q/W_K rows with ``w.view(H, D // 2, 2, E).transpose(1, 2).reshape(H * D, E)``.
    ``convert_rope_layout(..., to="half")`` is that permutation, and an interleaved model with
    the un-permuted weights gives the same logits."""
    H, D, E = 4, 8, 32
    w = torch.randn(H * D, E, dtype=torch.float64)
    hf_permute = w.view(H, D // 2, 2, E).transpose(1, 2).reshape(H * D, E)
    torch.testing.assert_close(convert_rope_layout(w, H, D, to="half"), hf_permute, rtol=0, atol=0)
    assert torch.equal(w.view(H, D, E)[:, rope_permutation(D)].reshape(H * D, E), hf_permute)

    hf = tiny_hf_model("llama")
    ours = from_hf(hf)
    meta = with_config(ours, rope_layout="interleaved")  # Meta's layout: rows un-permuted
    G, Dh = ours.config.n_kv_head, ours.config.head_dim
    with torch.no_grad():
        for blk_m, blk in zip(meta.blocks, ours.blocks, strict=True):
            blk_m.attn.q_proj.weight.copy_(
                convert_rope_layout(blk.attn.q_proj.weight, 4, Dh, to="interleaved")
            )
            blk_m.attn.k_proj.weight.copy_(
                convert_rope_layout(blk.attn.k_proj.weight, G, Dh, to="interleaved")
            )
        x = ids()
        torch.testing.assert_close(meta(x), hf(x).logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "family, attr, value, match",
    [
        ("llama", "hidden_act", "gelu", "hidden_act"),
        ("gemma2", "hidden_activation", "gelu", "hidden_activation"),
        ("gpt2", "activation_function", "relu", "activation_function"),
        ("gpt2", "scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx"),
        (
            "llama",
            "rope_parameters",
            {"rope_type": "longrope", "rope_theta": 5e5},
            "rope_type",
        ),  # Phi-3's
        ("deepseek_v3", "first_k_dense_replace", None, "first_k_dense_replace"),
    ],
)
def test_what_the_course_does_not_model_is_refused_by_name(family, attr, value, match):
    config = tiny_hf_config(family)
    setattr(config, attr, value)
    with pytest.raises(ValueError, match=match):
        config_from_hf(config)


def test_a_checkpoint_weight_the_course_does_not_read_is_refused():
    from mha_course.families import state_from_hf

    hf = tiny_hf_model("llama")
    sd = dict(hf.state_dict(), **{"model.layers.0.self_attn.extra.weight": torch.zeros(2)})
    ours = from_hf(hf)
    with pytest.raises(ValueError, match="does not model"):
        state_from_hf(sd, ours.config, ours)


def test_deepseek_mixture_of_experts_layers_are_refused():
    config = tiny_hf_config("deepseek_v3")
    config.first_k_dense_replace = 1
    with pytest.raises(ValueError, match="first_k_dense_replace"):
        config_from_hf(config)


def test_the_generate_command_runs_a_saved_checkpoint_in_the_course_modules(tmp_path):
    import subprocess
    import sys

    save_tiny_checkpoint(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    cmd = [
        sys.executable,
        "-m",
        "mha_course.cli",
        "generate",
        "--from-pretrained",
        str(tmp_path),
        "--prompt",
        "def attention(q, k, v):",
        "--max-new-tokens",
        "8",
        "--compare",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("def attention(q, k, v):")
    assert "mistral: 8 new tokens in" in run.stdout and "tokens/s" in run.stdout
    assert "transformers' generate: the same tokens" in run.stdout


def test_the_generate_command_names_a_missing_folder(tmp_path):
    from mha_course.cli import main

    assert main(["generate", "--from-pretrained", str(tmp_path / "nothing")]) == 2


def test_without_the_hf_extra_the_command_says_what_to_install(monkeypatch, capsys):
    import sys

    from mha_course.cli import main

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert main(["generate", "--from-pretrained", "anywhere"]) == 2
    assert "pip install -e '.[hf]'" in capsys.readouterr().err


def _config(**changes):
    base = dict(
        family="llama",
        vocab_size=V,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        head_dim=8,
        intermediate=48,
    )
    return FamilyConfig(**{**base, **changes})


BAD = [  # (what is called, the argument the message must name)
    (lambda: _config(n_head=0), "n_head"),
    (lambda: _config(n_kv_head=3), "n_kv_head"),
    (lambda: _config(head_dim=7), "head_dim"),
    (lambda: _config(norm="batchnorm"), "norm"),
    (lambda: _config(mlp="relu"), "mlp"),
    (lambda: _config(windows=(4,)), "windows"),
    (lambda: _config(windows=(4, 0)), "windows"),
    (lambda: _config(attn_softcap=0.0), "attn_softcap"),
    (lambda: _config(attention="mla", kv_lora_rank=0, qk_rope_dim=4, v_head_dim=8), "kv_lora_rank"),
    (lambda: _config(attention="mla", kv_lora_rank=8, qk_rope_dim=3, v_head_dim=8), "qk_rope_dim"),
    (lambda: FamilyLM(_config())(torch.zeros(2, 3)), "ids"),
    (lambda: FamilyLM(_config())(torch.zeros(3, dtype=torch.long)), "ids"),
    (lambda: FamilyLM(_config())(torch.zeros(1, 3, dtype=torch.long), [None]), "caches"),
    (lambda: FamilyLM(_config())(torch.full((1, 3), V)), "ids"),
    (
        lambda: FamilyLM(_config(positions="learned", max_positions=4))(
            torch.zeros(1, 5, dtype=torch.long)
        ),
        "ids",
    ),
    (
        lambda: greedy_generate(FamilyLM(_config()), torch.zeros(1, 2, dtype=torch.long), -1),
        "max_new_tokens",
    ),
]


@pytest.mark.parametrize("call, name", BAD, ids=[f"{i}-{n}" for i, (_, n) in enumerate(BAD)])
def test_bad_input_is_refused_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()


def test_an_unknown_family_is_refused_by_name():
    config = transformers.BertConfig()
    with pytest.raises(ValueError, match="model_type"):
        config_from_hf(config)
