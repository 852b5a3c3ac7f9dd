"""Chapter 13: the small GPT — cache equals full forward, generation, training, checkpoints."""

from __future__ import annotations

import math
import sys
import warnings

import pytest
import torch

from mha_course import KVCache, SlidingWindowCache
from mha_course.caches.static import StaticKVCache
from mha_course.gpt import (
    GPT,
    CorpusMismatchWarning,
    GPTConfig,
    TrainConfig,
    bigram_loss,
    convert_to_gqa,
    evaluate,
    load_checkpoint,
    load_corpus,
    train,
    uniform_loss,
    unigram_loss,
)
from mha_course.gpt.checkpoint import resume_path
from mha_course.gpt.corpus import REFERENCE_SHA256, STDLIB_FILES, check_corpus
from mha_course.gpt.data import training_batch
from mha_course.gpt.generate import generate, sample_next

TINY = dict(vocab_size=11, context_length=16, n_layer=2, n_head=4, n_embd=16)


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, **kw})).double().eval()


@pytest.mark.parametrize("kv", [None, 2, 1])
@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("positions", ["learned", "rope", "none"])
def test_cached_decode_equals_full_forward(kv, static, positions):
    model = tiny(n_kv_head=kv, positions=positions)
    ids = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    full = model(ids)  # (B, T, V)
    caches = model.new_caches(static=static)
    parts = [model(ids[:, :5], caches=caches)]  # a prompt chunk, then one id at a time
    parts += [model(ids[:, t : t + 1], caches=caches) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kv", [None, 2, 1])
@pytest.mark.parametrize("static", [False, True])
def test_plain_decode_steps_equal_the_checked_forward(kv, static):
    model = tiny(n_kv_head=kv)
    ids = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    caches = model.new_caches(static=static)
    assert model.takes_plain_steps(caches)
    full = model(ids)  # (B, T, V)
    with torch.no_grad():
        parts = [model(ids[:, :5], caches=caches)]
        parts += [model.decode_step(ids[:, t : t + 1], caches, True) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda: (tiny(positions="rope"), None), "RoPE inside attention"),
        (lambda: (tiny(impl="eager"), None), "another attention function"),
        (lambda: (tiny().train(), None), "training"),
        (lambda: (tiny(), [SlidingWindowCache(4) for _ in range(2)]), "a cache that drops keys"),
    ],
)
def test_plain_steps_are_refused_where_forward_would_branch(make, why):
    model, caches = make()
    assert not model.takes_plain_steps(caches or model.new_caches()), why


def test_generate_restores_each_modules_mode():
    model = tiny()
    model.blocks[0].mlp.train()  # a mixed state: generate samples in evaluation all the same
    prompt = torch.zeros(1, 3, dtype=torch.long)
    want = generate(tiny(), prompt, 5, temperature=0.0)
    torch.testing.assert_close(generate(model, prompt, 5, temperature=0.0), want, rtol=0, atol=0)
    assert not any(m.training for m in model.modules())  # restored as before: model.train(False)
    model.train()
    generate(model, prompt, 5, temperature=0.0)
    assert all(m.training for m in model.modules())


def test_static_cache_matches_concatenating_cache():
    a, b = KVCache(), StaticKVCache(max_len=8)
    g = torch.Generator().manual_seed(0)
    for n in (3, 1, 1, 2):
        k, v = torch.randn(2, 2, n, 4, generator=g), torch.randn(2, 2, n, 5, generator=g)
        for (x, y), (p, q) in [(a.update(k, v), b.update(k, v))]:
            torch.testing.assert_close(p, x, rtol=0, atol=0)
            torch.testing.assert_close(q, y, rtol=0, atol=0)
    assert b.length == a.length == 7 and b.nbytes == a.nbytes
    with pytest.raises(ValueError, match="max_len"):
        b.update(torch.randn(2, 2, 2, 4), torch.randn(2, 2, 2, 5))


def test_learned_positions_refuse_beyond_context_length():
    model = tiny()
    with pytest.raises(ValueError, match="context_length"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("temperature,top_k", [(0.0, None), (1.0, None), (0.8, 3)])
def test_generate_with_cache_equals_recomputing(temperature, top_k):
    model = tiny()
    prompt = torch.randint(0, 11, (2, 4), generator=torch.Generator().manual_seed(2))
    n = 30  # longer than context_length: the window slides on both paths
    out = [
        generate(
            model,
            prompt,
            n,
            temperature,
            top_k,
            generator=torch.Generator().manual_seed(3),
            use_cache=c,
        )
        for c in (True, False)
    ]
    assert out[0].shape == (2, 4 + n)
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=0)


def test_sample_next_top_k_and_greedy():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]]).repeat(500, 1)
    g = torch.Generator().manual_seed(0)
    drawn = sample_next(logits, 1.0, top_k=2, generator=g)
    assert set(drawn.flatten().tolist()) == {1, 3}
    assert sample_next(logits[:1], 0.0).item() == 1


def test_batches_are_a_shift_by_one_and_split_over_ranks():
    data = torch.arange(1000)
    x, y = training_batch(data, 8, 6, seed=0, step=5)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)
    halves = [training_batch(data, 8, 6, 0, 5, rank=r, world_size=2)[0] for r in (0, 1)]
    assert torch.equal(torch.cat(halves), x)


def test_corpus_is_fixed_and_mismatch_warns():
    corpus = load_corpus()
    if (3, 10) <= sys.version_info[:2] <= (3, 13):  # the versions the file list was checked on
        assert corpus.sha256 == REFERENCE_SHA256, "this Python's stdlib differs from 3.10-3.13's"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        other = load_corpus(files=STDLIB_FILES[:-1])
        assert not check_corpus(other, REFERENCE_SHA256)
    assert any(issubclass(x.category, CorpusMismatchWarning) for x in w)
    assert "numbers will differ" in str(w[-1].message) or "differ" in str(w[-1].message)


def test_baselines_order():
    train_ids = torch.randint(0, 5, (2000,), generator=torch.Generator().manual_seed(0))
    train_ids[1::2] = (train_ids[::2] + 1) % 5  # the next id is predictable from the previous
    uni, bi = unigram_loss(train_ids, train_ids, 5), bigram_loss(train_ids, train_ids, 5)
    assert bi < uni <= uniform_loss(5) + 1e-3 and math.isclose(uniform_loss(5), math.log(5))


def test_convert_to_gqa_keeps_outputs_when_heads_are_equal():
    model = tiny()
    with torch.no_grad():
        for b in model.blocks:  # make the two heads of each group identical
            for lin in (b.attn.k_proj, b.attn.v_proj):
                w = lin.weight.view(2, 2, 4, 16)  # (G, H/G, D, E)
                w[:, 1] = w[:, 0]
    gqa = convert_to_gqa(model, 2)
    assert gqa.config.n_kv_head == 2 and gqa.blocks[0].attn.num_kv_heads == 2
    ids = torch.randint(0, 11, (2, 10))
    torch.testing.assert_close(gqa(ids), model(ids), rtol=1e-10, atol=1e-10)


def _tiny_train(tmp_path, steps, **kw):
    mc = GPTConfig(context_length=16, n_layer=1, n_head=2, n_embd=16)
    tc = TrainConfig(
        batch_size=4,
        max_iters=steps,
        eval_interval=kw.pop("eval_interval", steps),
        eval_windows=8,
        final_eval_windows=8,
        warmup_iters=2,
        lr_decay_iters=6,
        dtype="float64",
    )
    return train(mc, tc, tmp_path / "m.pt", progress=False, **kw)


def test_train_from_scratch_writes_a_stamped_checkpoint(tmp_path):
    model, meta = _tiny_train(tmp_path, 6)
    ckpt = load_checkpoint(tmp_path / "m.pt")
    assert ckpt.meta["corpus_sha256"] == REFERENCE_SHA256
    assert len(ckpt.history["train_loss"]) == 6 and ckpt.history["val_step"] == [6]
    for key in ("wall_time_s", "stamp", "val_loss", "num_parameters"):
        assert key in ckpt.meta
    assert ckpt.meta["stamp"]["torch"] == torch.__version__
    _, val = ckpt.data()
    assert abs(evaluate(ckpt.model, val, 16, max_windows=8) - ckpt.meta["val_loss"]) < 1e-4
    assert ckpt.meta["val_loss"] < math.log(ckpt.config.vocab_size)  # it learned something


def test_resume_continues_exactly(tmp_path):
    straight, _ = _tiny_train(tmp_path / "a", 6)
    _tiny_train(tmp_path / "c", 3)  # an interrupted run: its resume state is at step 3
    assert torch.load(resume_path(tmp_path / "c" / "m.pt"), weights_only=True)["step"] == 3
    resumed, _ = _tiny_train(tmp_path / "c", 6, resume=True)
    for p, q in zip(resumed.parameters(), straight.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)


def test_head_scores_on_constructed_weights():
    from mha_course.gpt.heads import (
        delimiter_score,
        first_token_score,
        induction_score,
        previous_token_score,
    )

    T, n = 8, 4
    prev = torch.zeros(T, T)
    prev[0, 0] = 1
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1  # every query on its previous key
    first = torch.zeros(T, T)
    first[:, 0] = 1
    induction = first.clone()
    for t in range(n, T):
        induction[t] = 0
        induction[t, t - n + 1] = 1
    w = torch.stack([prev, first, induction])[None]  # (1, 3, T, T)
    torch.testing.assert_close(previous_token_score(w), torch.tensor([1.0, 1 / 7, 1 / 7]))
    torch.testing.assert_close(first_token_score(w), torch.tensor([1 / 7, 1.0, 3 / 7]))
    torch.testing.assert_close(induction_score(w, n), torch.tensor([0.0, 0.0, 1.0]))
    ids = torch.tensor([[5, 0, 5, 5, 0, 5, 5, 5]])
    score, uniform = delimiter_score(w, ids, [0])
    assert score[1] == 0 and score[0] == 2 / 8
    assert 0 < uniform < 1


def test_need_weights_returns_every_layer_and_same_logits():
    model = tiny()
    ids = torch.randint(0, 11, (2, 9))
    logits, weights = model(ids, need_weights=True)
    torch.testing.assert_close(logits, model(ids), rtol=1e-10, atol=1e-10)
    assert len(weights) == 2 and weights[0].shape == (2, 4, 9, 9)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, 4, 9, dtype=torch.float64))


@pytest.mark.parametrize("kv", [None, 1])
def test_torch_reference_and_static_loop_agree_with_the_course_model(kv):
    from mha_course.gpt.reference import static_decode, torch_reference

    model = tiny(n_kv_head=kv)
    ids = torch.randint(0, 11, (2, 12))
    torch.testing.assert_close(torch_reference(model)(ids), model(ids), rtol=1e-10, atol=1e-10)
    prompt = ids[:, :4]
    torch.testing.assert_close(
        static_decode(model, prompt, 10),
        generate(model, prompt, 10, temperature=0.0),
        rtol=0,
        atol=0,
    )
