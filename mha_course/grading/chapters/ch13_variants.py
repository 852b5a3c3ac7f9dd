"""Chapter 13's ablation item (predict, then measure): how the attention variant moves the KV
cache's bytes. The learner predicts, from the configs alone, each model's cache bytes as a ratio
to the first model's (more heads at the same width, fewer key/value groups, a latent), then
measures them with the course's caches after a forward pass. Graded on the measurement; the
prediction is recorded in the feedback, ungraded (``Item.prediction``).

The models are the course's ``GPT`` built in the CHILD from the case's sizes
(``gpt_drivers.ablation_models``); their weights do not matter to the bytes, so none are drawn.
"""

from __future__ import annotations

import numpy as np
import torch

from mha_course.caches.base import kv_cache_elements
from mha_course.grading.child.gpt_drivers import ablation_models
from mha_grader.items import Dtype, Mistake, PredictionItem

NOTEBOOK = "ex13_small_gpt"

KEYS_ONLY = (
    "keys only: each layer caches keys AND values; the values' bytes are missing (half "
    "of an MHA/GQA cache)"
)
ELEMENTS = (
    "elements, not bytes: the count is the cached numbers; each takes element_size() "
    "bytes (4 in float32, 8 in float64)"
)
ONE_LAYER = (
    "one layer only: every layer has its own cache (model.new_caches() holds n_layer), "
    "and the model's bytes are their sum"
)
QUERY_HEADS = (
    "query heads counted: the cache holds the G key/value heads, not the H query "
    "heads; with GQA/MQA it is H / G times smaller"
)
FORMULA = (
    "a formula, not a measurement: the MLA model's cache holds its latent (C numbers per "
    "token and layer), not 2 · G · D keys and values"
)


def _cases(rng: np.random.Generator) -> list[dict]:
    """A base model and three changes of it: heads doubled at the same width, another number of
    key/value groups, and MLA with a latent; GQA, MHA and MQA bases, float32 and float64."""
    cases = []
    for H, dtype in ((4, np.float32), (8, np.float64), (int(rng.choice([2, 4])), np.float64)):
        D = int(rng.choice([8, 16]))
        E, divisors = H * D, [g for g in range(1, H + 1) if H % g == 0]
        G = int(rng.choice(divisors))
        G2 = int(rng.choice([g for g in divisors if g != G]))
        heads = np.array([H, 2 * H, H, H], np.int64)
        kv = np.array([G, 2 * H if G == H else G, G2, 0], np.int64)  # 0: MLA
        latent = np.array([0, 0, 0, int(rng.integers(4, E // 2 + 1))], np.int64)
        B, T = int(rng.integers(1, 4)), int(rng.integers(3, 13))
        cases.append(
            {
                "n_layer": int(rng.integers(1 if cases else 2, 4)),
                "heads": heads,
                "kv_heads": kv,
                "latent": latent,
                "n_embd": E,
                "dtype": Dtype(np.dtype(dtype).name),
                "ids": rng.integers(0, 50, size=(B, T)),
            }
        )
    return cases


def measured(n_layer, heads, kv_heads, latent, n_embd, dtype, ids) -> torch.Tensor:
    """The bytes the course's caches hold after a forward pass over ``ids``, per model (what the
    learner measures; ``tests/grading/test_item_kinds.py`` checks the reference against it)."""
    out = []
    for m in ablation_models(n_layer, heads, kv_heads, latent, n_embd, dtype, ids.shape[1]):
        caches = m.new_caches()
        with torch.no_grad():
            m(ids.long(), caches)
        out.append(sum(c.nbytes for c in caches))
    return torch.tensor(out, dtype=torch.int64)


def _bytes(mode: str):
    """The same bytes from the course's formula (cheap: the parent builds no model), or what a
    known mistake returns (``mode``)."""

    def run(n_layer, heads, kv_heads, latent, n_embd, dtype, ids):
        B, T = ids.shape
        size = torch.empty(0, dtype=dtype).element_size()
        out = []
        for H, G, C in zip(heads.tolist(), kv_heads.tolist(), latent.tolist()):
            D = int(n_embd) // H
            if mode in ("query heads", "formula"):
                G = H if mode == "query heads" or G == 0 else G
                per_token = 2 * G * D
            else:
                per_token = C if G == 0 else (1 if mode == "keys only" else 2) * G * D
            layers = 1 if mode == "one layer" else int(n_layer)
            out.append(
                kv_cache_elements(layers, None, None, T, B, latent_dim=per_token)
                * (1 if mode == "elements" else size)
            )
        return torch.tensor(out, dtype=torch.int64)

    return run


def _ratios(graded: list[np.ndarray]) -> np.ndarray:
    """The quantity predicted: each model's bytes over the first model's."""
    measured = graded[0].astype(np.float64)
    return measured / measured[0]


ITEMS = [
    PredictionItem(
        id="ex13_cache_ablation",
        notebook=NOTEBOOK,
        function="cache_ablation",
        points=2,
        task="predict each model's KV-cache bytes as a ratio to the first's (recorded, ungraded), "
        "then measure the bytes its caches hold after a forward pass over ids (graded)",
        make_cases=_cases,
        shape="(n,)",
        reference=_bytes("ok"),
        driver="mha_course.grading.child.drivers:drive_ablation",
        dtype_must_match=False,
        rtol=0.0,
        atol=0.5,
        prediction=_ratios,
        mistakes=(
            Mistake("keys only", KEYS_ONLY, variant=_bytes("keys only")),
            Mistake("elements, not bytes", ELEMENTS, variant=_bytes("elements")),
            Mistake("one layer only", ONE_LAYER, variant=_bytes("one layer")),
            Mistake("query heads counted", QUERY_HEADS, variant=_bytes("query heads")),
            Mistake("a formula, not a measurement", FORMULA, variant=_bytes("formula")),
        ),
        uses=(),
    ),
]
