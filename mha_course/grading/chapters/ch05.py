"""Chapter 5's graded items: the offset causal mask, one KV-cache decoding step, a cached greedy loop."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from mha_course.caches.dense import KVCache
from mha_course.grading import mistakes as M
from mha_course.grading.child.drivers import drive_generate  # noqa: F401 - the item's driver, for the tests
from mha_course.grading.child.seeded import seeded
from mha_course.grading.child.served_model import ModelService, RemoteModel  # noqa: F401 - RemoteModel: the tests
from mha_course.grading.forbidden import CAUSAL_MASKS
from mha_course.models.tiny_lm import TinyCausalLM, greedy_generate_reference
from mha_course.ops.masks import causal_mask
from mha_grader.items import Item, Mistake, ServiceItem

NOTEBOOK = "ex05_causal_attention_kv_cache"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes_torch."

OFFSET_FORGOTTEN = (
    "new query i sits at position offset + i, so it "
    "sees keys j <= i + offset (torch's is_causal=True and a plain tril are "
    "top-left aligned: they assume an empty cache)"
)
S_TOO_SHORT = (
    "S = offset + L keys (the cached ones and the new ones), so the mask is (L, offset + L)"
)
ONLY_NEW_KEYS = "attends only to the new keys: the cached keys/values get no weight"
NEW_BEFORE_CACHE = "new keys/values put before the cached ones: the positions are out of order"
NO_CHUNK_MASK = (
    "no causal mask inside the chunk: with several new tokens, new query i sees "
    "the new keys after it"
)


# ---- task 1: the offset causal mask ----------------------------------------------------------
def _mask_cases(rng: np.random.Generator) -> list[dict]:
    wide = [
        {"L": int(L), "offset": int(o)}
        for L, o in zip(rng.integers(1, 21, size=3), rng.integers(0, 41, size=3))
    ]  # rarely shared
    return [
        {"L": 3, "offset": int(rng.integers(4, 7))},
        {"L": 1, "offset": 5},
        {"L": int(rng.integers(4, 6)), "offset": 0},
        {"L": 2, "offset": 1},
        *wide,
    ]


def _narrow(got: np.ndarray, case: dict) -> bool:
    return (
        got.ndim == 2
        and got.shape[0] == case["L"]
        and got.shape[1] == case["L"] != case["L"] + case["offset"]
    )


# ---- task 2: one decoding step -----------------------------------------------------------------
def _f(rng: np.random.Generator, dtype, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(dtype)


def _step_cases(rng: np.random.Generator) -> list[dict]:
    def case(B, H, L, S_old, D, dtype):
        return {
            "q_new": _f(rng, dtype, B, H, L, D),
            "k_new": _f(rng, dtype, B, H, L, D),
            "v_new": _f(rng, dtype, B, H, L, D),
            "k_cache": _f(rng, dtype, B, H, S_old, D),
            "v_cache": _f(rng, dtype, B, H, S_old, D),
        }

    return [
        case(2, 2, 3, 4, 8, np.float32),  # a chunk after a cache: every mistake shows here
        case(1, 3, 1, 6, 4, np.float64),  # the usual single-token step
        case(2, 1, 4, 0, 8, np.float64),
    ]  # prefill: an empty cache (S_old = 0)


def _attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _step(q_new, k_new, v_new, k_cache, v_cache):
    k_all = torch.cat([k_cache, k_new], dim=-2)  # (B, H, S_old, D) + (B, H, L, D) -> (B, H, S, D)
    v_all = torch.cat([v_cache, v_new], dim=-2)
    L, S = q_new.shape[-2], k_all.shape[-2]
    return _attend(q_new, k_all, v_all, causal_mask(L, S, offset=S - L)), k_all, v_all


def _step_variant(mask_fn=None, mask_mode="ok", softmax="stable", only_new=False, new_first=False):
    """What a decoding step with one mistake returns (mask_fn(L, S, offset) gives its mask)."""

    def run(q_new, k_new, v_new, k_cache, v_cache):
        pair = (k_new, k_cache) if new_first else (k_cache, k_new)
        k_all, v_all = (
            torch.cat(pair, dim=-2),
            torch.cat((v_new, v_cache) if new_first else (v_cache, v_new), dim=-2),
        )
        k_att, v_att = (k_new, v_new) if only_new else (k_all, v_all)
        L, S = q_new.shape[-2], k_att.shape[-2]
        mask = (mask_fn or (lambda L, S, o: causal_mask(L, S, offset=o)))(L, S, S - L)
        out = M.attention_variant(q_new, k_att, v_att, mask, mask_mode=mask_mode, softmax=softmax)
        return out, k_all, v_all

    return run


def _shifted(shift):
    return lambda L, S, o: M.causal_mask_variant(L, S, o, shift=shift)


_STEP_MISTAKES = (
    Mistake(
        "offset forgotten",
        OFFSET_FORGOTTEN,
        variant=_step_variant(lambda L, S, o: causal_mask(L, S)),
    ),
    Mistake("only the new keys", ONLY_NEW_KEYS, variant=_step_variant(only_new=True)),
    Mistake("new before cache", NEW_BEFORE_CACHE, variant=_step_variant(new_first=True)),
    Mistake("off by one", M.CAUSAL_OFF_BY_ONE, variant=_step_variant(_shifted(-1))),
    Mistake("off by one", M.CAUSAL_OFF_BY_ONE, variant=_step_variant(_shifted(1))),
    Mistake(
        "no causal mask in the chunk",
        NO_CHUNK_MASK,
        variant=_step_variant(lambda L, S, o: torch.ones(L, S, dtype=torch.bool)),
    ),
    Mistake("mask inverted", M.MASK_INVERTED, variant=_step_variant(mask_mode="inverted")),
    Mistake(
        "mask inverted",
        M.MASK_INVERTED,
        variant=_step_variant(mask_mode="inverted", softmax="naive"),
    ),
    Mistake(
        "mask after softmax", M.MASK_AFTER_SOFTMAX, variant=_step_variant(mask_mode="after_softmax")
    ),
)


# ---- task 3: a cached greedy loop --------------------------------------------------------------
# The class grader builds models in several threads at once: the weights come from the seed's
# own generator (``seeded``), never torch's global one, which other threads re-seed.
def _build(seed: int, num_layers: int) -> TinyCausalLM:
    model = TinyCausalLM(vocab_size=16, embed_dim=32, num_heads=4, num_layers=num_layers)
    return seeded(model, seed).double().eval()


def _generate_cases(rng: np.random.Generator) -> list[dict]:
    # The model's seed is HIDDEN from the child and drawn from 2**62: the weights exist only in
    # the parent (served_model.py), so no one can rebuild the model, or search its seed, locally.
    return [
        {
            "seed": int(rng.integers(2**62)),
            "num_layers": 2,
            "prompt": rng.integers(0, 16, size=(2, 3)),
            "n_new": 4,
        },
        {
            "seed": int(rng.integers(2**62)),
            "num_layers": 3,
            "prompt": rng.integers(0, 16, size=(1, 5)),
            "n_new": 3,
        },
    ]


def serve_model(case: dict) -> ModelService:
    """PARENT: the case's real model, which counts the tokens the learner's loop feeds it."""
    B, P = case["prompt"].shape
    return ModelService(_build(case["seed"], case["num_layers"]), B, P, case["n_new"])


def _generate_reference(seed, num_layers, prompt, n_new):
    return greedy_generate_reference(_build(seed, num_layers), prompt, n_new), torch.tensor(True)


def _generate_variant(mode):
    """What a cached loop with one mistake produces (mode names the mistake)."""

    def run(seed, num_layers, prompt, n_new):
        model, ids = _build(seed, num_layers), prompt
        caches = [KVCache()] * num_layers if mode == "shared cache" else model.new_caches()
        with torch.no_grad():
            step_input = prompt
            for _ in range(n_new):
                logits = model(step_input, None if mode == "cache dropped" else caches)
                next_id = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
                ids = torch.cat([ids, next_id], dim=1)
                step_input = ids if mode == "whole sequence" else next_id
        return ids, torch.tensor(True)

    return run


def _n_tokens(delta):
    return lambda got, case: (
        got.ndim == 2 and got.shape[1] == case["prompt"].shape[1] + case["n_new"] + delta
    )


ITEMS = [
    Item(
        id="ex05_offset_mask",
        notebook=NOTEBOOK,
        function="offset_causal_mask",
        points=1,
        task="bool (L, offset + L) mask: new query i may attend to key j when j <= i + offset",
        make_cases=_mask_cases,
        shape="(L, S) with S = offset + L",
        reference=lambda L, offset: causal_mask(L, offset=offset),
        mistakes=(
            Mistake(
                "offset forgotten",
                OFFSET_FORGOTTEN,
                variant=lambda L, offset: causal_mask(L, L + offset),
            ),
            Mistake("mask too narrow", S_TOO_SHORT, matches=_narrow),
            Mistake(
                "inverted",
                M.MASK_INVERTED,
                variant=lambda L, offset: M.causal_mask_variant(L, None, offset, inverted=True),
            ),
            Mistake(
                "off by one",
                M.CAUSAL_OFF_BY_ONE,
                variant=lambda L, offset: M.causal_mask_variant(L, L + offset, offset, shift=-1),
            ),
            Mistake(
                "off by one",
                M.CAUSAL_OFF_BY_ONE,
                variant=lambda L, offset: M.causal_mask_variant(L, L + offset, offset, shift=1),
            ),
        ),
        forbidden=CAUSAL_MASKS,
    ),
    Item(
        id="ex05_decode_step",
        # the solution builds its mask inline; a learner's step that calls task 1 is graded alone
        substitutes=(("offset_causal_mask", _SUB + "offset_causal_mask"),),
        notebook=NOTEBOOK,
        function="decode_step",
        points=2,
        task="append the new keys/values to the cache, then attend with the offset causal mask",
        make_cases=_step_cases,
        shape="output (B, H, L, D); caches (B, H, S_old + L, D)",
        reference=_step,
        mistakes=_STEP_MISTAKES,
        # torch's SDPA is allowed (the task is the cache and the offset mask), the package's mask is not;
        # KVCache and MultiHeadAttention can't be forbidden in ex05: the greedy loop's model needs them
        forbidden=CAUSAL_MASKS,
    ),
    ServiceItem(
        id="ex05_greedy_generate",
        notebook=NOTEBOOK,
        function="greedy_generate",
        points=2,
        task="greedy decoding with one KVCache per layer: prefill the prompt, then feed one token per step",
        make_cases=_generate_cases,
        shape="(B, P + n_new)",
        reference=_generate_reference,
        driver="mha_course.grading.child.drivers:drive_generate",
        service=serve_model,
        hidden=("seed",),
        mistakes=(
            Mistake(
                "whole sequence fed to the cache",
                "the whole sequence was fed while the caches "
                "already hold its prefix, so its keys/values are appended twice: after the "
                "prefill, feed only the newest token",
                variant=_generate_variant("whole sequence"),
            ),
            Mistake(
                "one cache for all layers",
                "one KVCache per layer: each layer caches its own "
                "keys and values (model.new_caches())",
                variant=_generate_variant("shared cache"),
            ),
            Mistake(
                "caches not passed",
                "the newest token alone, without the caches, has no "
                "context: pass the same caches on every step",
                variant=_generate_variant("cache dropped"),
            ),
            Mistake(
                "no cache used",
                "the model re-read the whole prefix every step (the O(T²) "
                "loop): no KV cache was used",
                matches=lambda got, case: got.ndim == 0 and not bool(got),
            ),
            Mistake(
                "one token too many",
                "one token more than the prompt and its n_new new tokens",
                matches=_n_tokens(1),
            ),
            Mistake(
                "one token too few",
                "one token fewer than the prompt and its n_new new tokens",
                matches=_n_tokens(-1),
            ),
            Mistake(
                "prompt missing",
                "prompt missing: only the n_new new tokens came back, not (B, P + n_new)",
                matches=lambda got, case: got.ndim == 2 and got.shape[1] == case["n_new"],
            ),
        ),
        forbidden=("mha_course.models.tiny_lm.greedy_generate_reference",),
    ),
]
