"""Chapter 13's capstone, part 1: the learner's own pre-norm ``Block`` and the ``SmallGPT`` around
it, graded by RUNNING them on states loaded by name (part 2, the training step: ``ch13_train``).

The model items load a state into the learner's module by the course's parameter names (those of
:class:`mha_course.gpt.model.GPT`, the names the shipped checkpoints store) and compare its
output with the course's model holding the same state: the chapter 13 architecture (E = 128,
H = 4, 4 layers, T = 64) and smaller GQA/MQA/bias variants, float64 and float32, weights drawn
per student. As in a shipped checkpoint, the state has no ``lm_head.weight`` (the read-out is
tied to ``wte.weight``); every parameter is zeroed before loading, so an untied read-out reads
zeros.

The drivers run in the CHILD, where the course's ``Block``/``GPT``/``MLP`` are forbidden (stubbed),
so the state's names and shapes come from :func:`gpt_shapes`, which a test keeps equal to the
course modules'.
"""

from __future__ import annotations

import numpy as np
import torch

from mha_course.grading import mistakes as M
from mha_course.grading.child.gpt_drivers import (  # noqa: F401 - the model's names and states: the tests use them too
    _block_config,
    block_shapes,
    course_gpt,
    gpt_config,
    gpt_shapes,
    load_state,
    seeded_state,
)
from mha_grader.items import DriverItem, Dtype, Mistake

NOTEBOOK = "ex13_small_gpt"
# graded alone when an earlier task fails: the course's own earlier functions (issue #31)
_SUB = "mha_course.grading.child.substitutes_torch."
_MODEL = (
    "mha_course.gpt.model.Block",
    "mha_course.gpt.model.GPT",
    "mha_course.gpt.model.MLP",
    "mha_course.gpt.checkpoint.load_checkpoint",
)

POST_NORM = (
    "post-norm: the LayerNorm is applied to the sum x + sublayer(x) (the original "
    "Transformer's order); the chapter's block normalises the sublayer's INPUT and adds "
    "its output to the untouched stream"
)
NO_RESIDUAL = (
    "missing residual: a sublayer's output replaces the stream instead of being added to it"
)
NO_CAUSAL = (
    "no causal mask: every position also reads the tokens after it (the next-token "
    "task leaks its answer)"
)
NAMES = (
    "parameter names or shapes differ from the course's GPT (the state_dict keys listed in "
    "the task): the grader could not load its weights into your module"
)
UNTIED = (
    "untied read-out: the logits are all 0 — the state (like a shipped checkpoint) holds "
    "no lm_head.weight, and your read-out is a matrix of its own, not the embedding wte"
)
TANH_GELU = (
    "tanh GELU: the MLP uses GELU's tanh approximation (GPT-2's gelu_new, "
    "approximate='tanh'); the course's MLP, like nn.GELU() and F.gelu by default, uses the "
    "exact GELU"
)
NO_POSITIONS = "no position embeddings: wpe's rows are never added to the token embeddings"
NO_FINAL_LN = "no final LayerNorm: the read-out sees the residual stream without ln_f"


# ---- the state: the course's names and shapes, values drawn from a seed ---------------------
# ---- task 5: the block ----------------------------------------------------------------------
def _block_cases(rng: np.random.Generator) -> list[dict]:
    def case(H, G, D, bias, B, T, dtype):
        return {
            "seed": int(rng.integers(2**31)),
            "n_head": H,
            "n_kv_head": G,
            "n_embd": H * D,
            "bias": bias,
            "x": rng.normal(size=(B, T, H * D)).astype(dtype),
        }

    return [
        case(4, 4, 32, False, 2, int(rng.integers(40, 65)), np.float64),  # chapter 13's block
        case(6, 2, 8, True, 3, int(rng.integers(5, 12)), np.float32),
        case(4, 1, 6, False, 1, int(rng.integers(6, 15)), np.float64),
    ]


def _course_block(seed, n_head, n_kv_head, n_embd, bias, x):
    from mha_course.gpt.model import Block

    c = _block_config(n_head, n_kv_head, n_embd, bias, x.shape[1])
    block = Block(c)
    load_state(block, seeded_state(block_shapes(c), seed))
    return block.to(x.dtype).eval()


def block_variant(block, x, *, post_norm=False, residual=(True, True), mask="causal", gelu="none"):
    """The block's forward with one chosen mistake (the defaults equal ``Block.forward``).
    ``mask``: ``"causal"``, ``"none"`` or a shift of the causal diagonal (±1); ``gelu``: the
    MLP's GELU, ``"none"`` (exact) or ``"tanh"`` (the approximation).

    Shape:
        x: (B, T, E). Returns (B, T, E).
    """

    def attn(h):
        if mask == "causal":
            return block.attn(h, is_causal=True)[0]
        if mask == "none":
            return block.attn(h)[0]
        return block.attn(h, attn_mask=M.causal_mask_variant(h.shape[1], h.shape[1], shift=mask))[0]

    def mlp(h):  # (B, T, E) -> (B, T, mlp_ratio * E) -> (B, T, E)
        return block.mlp.proj(torch.nn.functional.gelu(block.mlp.fc(h), approximate=gelu))

    if post_norm:
        x = block.ln_1(x + attn(x))
        return block.ln_2(x + mlp(x))
    a = attn(block.ln_1(x))
    x = x + a if residual[0] else a
    m = mlp(block.ln_2(x))
    return x + m if residual[1] else m


def _block_ref(*case, **switches):
    block = _course_block(*case)
    with torch.no_grad():
        return block_variant(block, case[-1], **switches) if switches else block(case[-1])


def _names_wrong(got: np.ndarray, case: dict) -> bool:
    return got.shape == (0,)


_BLOCK_MISTAKES = (
    Mistake("names", NAMES, matches=_names_wrong),
    Mistake("post-norm", POST_NORM, variant=lambda *a: _block_ref(*a, post_norm=True)),
    Mistake(
        "missing residual", NO_RESIDUAL, variant=lambda *a: _block_ref(*a, residual=(False, True))
    ),
    Mistake(
        "missing residual", NO_RESIDUAL, variant=lambda *a: _block_ref(*a, residual=(True, False))
    ),
    Mistake(
        "missing residual", NO_RESIDUAL, variant=lambda *a: _block_ref(*a, residual=(False, False))
    ),
    Mistake("no causal mask", NO_CAUSAL, variant=lambda *a: _block_ref(*a, mask="none")),
    Mistake("off by one", M.CAUSAL_OFF_BY_ONE, variant=lambda *a: _block_ref(*a, mask=1)),
    Mistake("off by one", M.CAUSAL_OFF_BY_ONE, variant=lambda *a: _block_ref(*a, mask=-1)),
    Mistake("tanh GELU", TANH_GELU, variant=lambda *a: _block_ref(*a, gelu="tanh")),
)


# ---- task 6: the model around it ------------------------------------------------------------
def _model_cases(rng: np.random.Generator) -> list[dict]:
    def case(V, T, n_layer, H, G, D, bias, B, L, dtype):
        return {
            "seed": int(rng.integers(2**31)),
            "vocab_size": V,
            "context_length": T,
            "n_layer": n_layer,
            "n_head": H,
            "n_kv_head": G,
            "n_embd": H * D,
            "bias": bias,
            "dtype": Dtype(dtype),
            "ids": rng.integers(0, V, size=(B, L)),
        }

    return [
        case(
            int(rng.integers(80, 100)),
            64,
            4,
            4,
            4,
            32,
            False,
            2,
            int(rng.integers(40, 65)),
            "float64",
        ),  # the chapter 13 architecture (ch13_mha.pt's shapes)
        case(int(rng.integers(10, 30)), 16, 2, 6, 2, 8, True, 3, 16, "float32"),
        case(
            int(rng.integers(10, 30)), 12, 3, 4, 1, 6, False, 2, int(rng.integers(4, 12)), "float64"
        ),
    ]


def gpt_variant(model, ids, *, positions=True, final_ln=True, **block_switches):
    """The GPT's forward with one chosen mistake (the defaults equal ``GPT.forward``).

    Shape:
        ids: (B, T). Returns logits (B, T, V).
    """
    x = model.wte(ids)  # (B, T) -> (B, T, E)
    if positions:
        x = x + model.wpe.weight[: ids.shape[1]]  # (B, T, E) + (T, E)
    for block in model.blocks:
        x = block_variant(block, x, **block_switches)
    return model.lm_head(model.ln_f(x) if final_ln else x)  # (B, T, E) -> (B, T, V)


def _model_ref(*case, **switches):
    *sizes, dtype, ids = case
    model = course_gpt(*sizes).to(dtype)
    with torch.no_grad():
        return gpt_variant(model, ids, **switches) if switches else model(ids)


_MODEL_MISTAKES = (
    Mistake("names", NAMES, matches=_names_wrong),
    Mistake("untied read-out", UNTIED, matches=lambda got, case: got.size > 0 and not got.any()),
    Mistake(
        "no position embeddings", NO_POSITIONS, variant=lambda *a: _model_ref(*a, positions=False)
    ),
    Mistake("no final LayerNorm", NO_FINAL_LN, variant=lambda *a: _model_ref(*a, final_ln=False)),
    Mistake("post-norm", POST_NORM, variant=lambda *a: _model_ref(*a, post_norm=True)),
    Mistake("no causal mask", NO_CAUSAL, variant=lambda *a: _model_ref(*a, mask="none")),
    Mistake("tanh GELU", TANH_GELU, variant=lambda *a: _model_ref(*a, gelu="tanh")),
)


ITEMS = [
    DriverItem(
        id="ex13_block",
        notebook=NOTEBOOK,
        function="Block",
        points=2,
        task="Block(config): x + attn(ln_1(x)) (causal), then x + mlp(ln_2(x)); the course's names",
        make_cases=_block_cases,
        shape="(B, T, E)",
        reference=_block_ref,
        driver="mha_course.grading.child.drivers:drive_block",
        mistakes=_BLOCK_MISTAKES,
        forbidden=_MODEL,
    ),
    DriverItem(
        id="ex13_gpt",
        notebook=NOTEBOOK,
        function="SmallGPT",
        points=2,
        task="SmallGPT(config): wte + wpe, n_layer Blocks, ln_f, read-out tied to wte -> logits",
        make_cases=_model_cases,
        shape="(B, T, V)",
        reference=_model_ref,
        driver="mha_course.grading.child.drivers:drive_model",
        mistakes=_MODEL_MISTAKES,
        forbidden=_MODEL,
        uses=("Block",),
        substitutes=(("Block", _SUB + "Block"),),
    ),
]
