"""Chapter 20: FamilyLM picks its attention from the one registry (ATTENTION_FUNCTIONS): torch's
fused ``sdpa`` by default, ``eager`` where the family needs it (Gemma 2's score cap), and every
layer says what ran and why (``dispatch``, as MultiHeadAttention's). The fused path equals the
eager one in float64 for every family: a prompt, a padded batch, decoding past the windows, with
grouped heads. Nothing is downloaded."""

from __future__ import annotations

import dataclasses

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the [hf] extra (transformers) is not installed"
)

from mha_course.attention.functions import ATTENTION_FUNCTIONS  # noqa: E402
from mha_course.families import FAMILIES, FamilyLM, from_hf  # noqa: E402
from mha_course.families.tiny import VOCAB, tiny_hf_model  # noqa: E402

CAPPED = {"gemma2"}  # attention-logit soft-capping: no fused kernel of the registry takes it
ATOL = 1e-12  # float64: the two paths differ by rounding only
VARIANTS = [  # the tiny configs leave Qwen's window off; GQA (G = 2 of H = 4) is everywhere
    ("qwen3", {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1}),
]
CASES = [(f, {}) for f in FAMILIES] + VARIANTS
IDS = [f if not c else f"{f}-window" for f, c in CASES]


def ids(L: int, B: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB - 1, (B, L), generator=torch.Generator().manual_seed(L))


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def pair(request):
    family, changes = request.param
    hf = tiny_hf_model(family, **changes)
    return family, from_hf(hf, impl="eager"), from_hf(hf)  # from_hf's default: sdpa


def test_each_layer_reports_what_ran(pair):
    family, eager, fused = pair
    with torch.no_grad():
        fused(ids(8))
        eager(ids(8))
    assert fused.impl == "sdpa" and eager.impl == "eager"
    assert eager.dispatch == [("eager", None)] * len(eager.blocks)
    if family in CAPPED:
        for ran, why in fused.dispatch:
            assert ran == "eager" and "sdpa takes no score cap" in why
    else:
        assert fused.dispatch == [("sdpa", None)] * len(fused.blocks)


def test_fused_equals_eager_in_float64(pair):
    """A prompt; a left-padded batch (padding rows and uneven prompts); then one token at a
    time with the caches, past the window W = 5 (Mistral, Gemma 2 and 3, Qwen's variant)."""
    _, eager, fused = pair
    x = ids(12)
    mask = torch.ones_like(x)
    mask[0, :7] = 0  # row 0: 5 real tokens after 7 of padding
    with torch.no_grad():
        torch.testing.assert_close(fused(x), eager(x), rtol=0, atol=ATOL)
        got, want = fused(x, attention_mask=mask), eager(x, attention_mask=mask)
        real = mask.bool()
        torch.testing.assert_close(got[real], want[real], rtol=0, atol=ATOL)
        caches = fused.new_caches(), eager.new_caches()
        step = ids(3)
        for _ in range(9):  # 3 + 9 = 12 positions > W
            got, want = fused(step, caches[0]), eager(step, caches[1])
            torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
            step = want[:, -1:].argmax(-1)  # (B, 1)


def test_a_plain_prompt_and_a_decoding_step_hand_sdpa_no_mask(monkeypatch):
    """No (L, S) mask is built where the fused kernel's own causality serves: a prompt without
    padding runs is_causal; one query that sees every cached key runs without a mask."""
    calls = []
    sdpa = ATTENTION_FUNCTIONS["sdpa"]

    def spy(q, k, v, **kw):
        calls.append((kw["attn_mask"] is None, kw["is_causal"]))
        return sdpa.run(q, k, v, **kw)

    monkeypatch.setitem(ATTENTION_FUNCTIONS, "sdpa", dataclasses.replace(sdpa, run=spy))
    model = from_hf(tiny_hf_model("llama"))
    caches = model.new_caches()
    with torch.no_grad():
        model(ids(6), caches)
        assert calls == [(True, True)] * 3 and model.dispatch == [("sdpa", None)] * 3
        calls.clear()
        model(ids(1), caches)
        assert calls == [(True, False)] * 3
        calls.clear()
        model(ids(1), caches, attention_mask=torch.ones(2, 8, dtype=torch.long))
        assert calls == [(False, False)] * 3  # padding marks: the mask goes to sdpa itself


def test_a_kernel_without_masks_serves_a_plain_prompt_and_says_why_not_a_padded_one():
    model = from_hf(tiny_hf_model("llama"), impl="tiled")
    eager = from_hf(tiny_hf_model("llama"), impl="eager")
    x, mask = ids(8), torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        torch.testing.assert_close(model(x), eager(x), rtol=0, atol=ATOL)
        assert model.dispatch == [("tiled", None)] * 3
        got = model(x, attention_mask=mask)
        torch.testing.assert_close(got, eager(x, attention_mask=mask), rtol=0, atol=ATOL)
    for ran, why in model.dispatch:
        assert ran == "eager" and "tiled takes is_causal but no attn_mask" in why


@pytest.mark.parametrize(
    "make",
    [
        lambda: FamilyLM(from_hf(tiny_hf_model("llama")).config, impl="fast"),
        lambda: from_hf(tiny_hf_model("llama"), impl="fast"),
        lambda: setattr(from_hf(tiny_hf_model("llama")), "impl", "fast"),
    ],
    ids=["FamilyLM", "from_hf", "setting impl"],
)
def test_an_unknown_function_is_refused_naming_the_registry(make):
    with pytest.raises(ValueError, match=r"impl: expected one of \('eager', 'sdpa'.*got 'fast'"):
        make()
