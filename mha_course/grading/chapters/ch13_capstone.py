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

import math

import numpy as np
import torch

from mha_grader.items import Dtype, Item, Mistake

from ...gpt.config import GPTConfig
from .. import mistakes as M

NOTEBOOK = "ex13_small_gpt"
_MODEL = ("mha_course.gpt.model.Block", "mha_course.gpt.model.GPT", "mha_course.gpt.model.MLP",
          "mha_course.gpt.checkpoint.load_checkpoint")

POST_NORM = ("post-norm: the LayerNorm is applied to the sum x + sublayer(x) (the original "
             "Transformer's order); the chapter's block normalises the sublayer's INPUT and adds "
             "its output to the untouched stream")
NO_RESIDUAL = ("missing residual: a sublayer's output replaces the stream instead of being "
               "added to it")
NO_CAUSAL = ("no causal mask: every position also reads the tokens after it (the next-token "
             "task leaks its answer)")
NAMES = ("parameter names or shapes differ from the course's GPT (the state_dict keys listed in "
         "the task): the grader could not load its weights into your module")
UNTIED = ("untied read-out: the logits are all 0 — the state (like a shipped checkpoint) holds "
          "no lm_head.weight, and your read-out is a matrix of its own, not the embedding wte")
NO_POSITIONS = "no position embeddings: wpe's rows are never added to the token embeddings"
NO_FINAL_LN = "no final LayerNorm: the read-out sees the residual stream without ln_f"


# ---- the state: the course's names and shapes, values drawn from a seed ---------------------
def gpt_config(vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, bias) -> GPTConfig:
    """The case's model config (learned positions, no dropout, tied read-out)."""
    G = int(n_kv_head)
    return GPTConfig(vocab_size=int(vocab_size), block_size=int(block_size), n_layer=int(n_layer),
                     n_head=int(n_head), n_kv_head=None if G == int(n_head) else G,
                     n_embd=int(n_embd), bias=bool(bias), dropout=0.0)


def block_shapes(c: GPTConfig, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """``Block``'s state_dict names and shapes (E = n_embd, G·D the key/value width)."""
    E, W, F4 = c.n_embd, c.kv_heads * c.head_dim, c.mlp_ratio * c.n_embd
    linears = {"attn.q_proj": (E, E), "attn.k_proj": (W, E), "attn.v_proj": (W, E),
               "attn.out_proj": (E, E), "mlp.fc": (F4, E), "mlp.proj": (E, F4)}
    out: dict[str, tuple[int, ...]] = {}
    for norm, layers in (("ln_1", ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj")),
                         ("ln_2", ("mlp.fc", "mlp.proj"))):
        out[prefix + norm + ".weight"] = (E,)
        if c.bias:
            out[prefix + norm + ".bias"] = (E,)
        for name in layers:
            out[prefix + name + ".weight"] = linears[name]
            if c.bias:
                out[prefix + name + ".bias"] = (linears[name][0],)
    return out


def gpt_shapes(c: GPTConfig) -> dict[str, tuple[int, ...]]:
    """``GPT``'s state_dict names and shapes as a checkpoint stores them (no ``lm_head.weight``)."""
    out = {"wte.weight": (c.vocab_size, c.n_embd), "wpe.weight": (c.block_size, c.n_embd)}
    for i in range(c.n_layer):
        out.update(block_shapes(c, f"blocks.{i}."))
    out["ln_f.weight"] = (c.n_embd,)
    if c.bias:
        out["ln_f.bias"] = (c.n_embd,)
    return out


def seeded_state(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """float64 values from ``torch.Generator().manual_seed(seed)``, in ``shapes``' order:
    matrices N(0, 1/in), LayerNorm weights 1 + N(0, 0.3²), biases N(0, 0.3²)."""
    g = torch.Generator().manual_seed(int(seed) % 2**63)
    out = {}
    for name, shape in shapes.items():
        r = torch.randn(shape, generator=g, dtype=torch.float64)
        if len(shape) == 2:
            out[name] = r / math.sqrt(shape[1])
        else:
            out[name] = (1.0 if name.endswith("weight") else 0.0) + 0.3 * r
    return out


def load_state(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    """Zero every parameter of ``module``, then copy ``state`` in by name. False (nothing loaded)
    when its names/shapes differ from ``state``'s, apart from a tied ``lm_head.weight``."""
    own = module.state_dict()
    extra = set(own) - set(state) - {"lm_head.weight"}
    if extra or any(k not in own or tuple(own[k].shape) != tuple(v.shape) for k, v in state.items()):
        return False
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
        for k, v in state.items():
            own[k].copy_(v)
    return True


# ---- task 5: the block ----------------------------------------------------------------------
def _block_cases(rng: np.random.Generator) -> list[dict]:
    def case(H, G, D, bias, B, L, dtype):
        return {"seed": int(rng.integers(2**31)), "n_head": H, "n_kv_head": G, "n_embd": H * D,
                "bias": bias, "x": rng.normal(size=(B, L, H * D)).astype(dtype)}
    return [case(4, 4, 32, False, 2, int(rng.integers(40, 65)), np.float64),  # chapter 13's block
            case(6, 2, 8, True, 3, int(rng.integers(5, 12)), np.float32),
            case(4, 1, 6, False, 1, int(rng.integers(6, 15)), np.float64)]


def _block_config(n_head, n_kv_head, n_embd, bias, L) -> GPTConfig:
    return gpt_config(2, L, 1, n_head, n_kv_head, n_embd, bias)


def drive_block(cls, seed, n_head, n_kv_head, n_embd, bias, x):
    """CHILD: build ``cls(config)``, load the case's state, return its output on ``x``."""
    c = _block_config(n_head, n_kv_head, n_embd, bias, x.shape[1])
    block = cls(c)
    if not load_state(block, seeded_state(block_shapes(c), seed)):
        return torch.empty(0)
    block.to(x.dtype).eval()
    with torch.no_grad():
        return block(x)


def _course_block(seed, n_head, n_kv_head, n_embd, bias, x):
    from ...gpt.model import Block
    c = _block_config(n_head, n_kv_head, n_embd, bias, x.shape[1])
    block = Block(c)
    load_state(block, seeded_state(block_shapes(c), seed))
    return block.to(x.dtype).eval()


def block_variant(block, x, *, post_norm=False, residual=(True, True), mask="causal"):
    """The block's forward with one chosen mistake (the defaults equal ``Block.forward``).
    ``mask``: ``"causal"``, ``"none"`` or a shift of the causal diagonal (±1).

    Shape:
        x: (B, L, E). Returns (B, L, E).
    """
    def attn(h):
        if mask == "causal":
            return block.attn(h, is_causal=True)[0]
        if mask == "none":
            return block.attn(h)[0]
        return block.attn(h, attn_mask=M.causal_mask_variant(h.shape[1], h.shape[1], shift=mask))[0]
    if post_norm:
        x = block.ln_1(x + attn(x))
        return block.ln_2(x + block.mlp(x))
    a = attn(block.ln_1(x))
    x = x + a if residual[0] else a
    m = block.mlp(block.ln_2(x))
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
    Mistake("missing residual", NO_RESIDUAL, variant=lambda *a: _block_ref(*a, residual=(False, True))),
    Mistake("missing residual", NO_RESIDUAL, variant=lambda *a: _block_ref(*a, residual=(True, False))),
    Mistake("missing residual", NO_RESIDUAL, variant=lambda *a: _block_ref(*a, residual=(False, False))),
    Mistake("no causal mask", NO_CAUSAL, variant=lambda *a: _block_ref(*a, mask="none")),
    Mistake("off by one", M.CAUSAL_OFF_BY_ONE, variant=lambda *a: _block_ref(*a, mask=1)),
    Mistake("off by one", M.CAUSAL_OFF_BY_ONE, variant=lambda *a: _block_ref(*a, mask=-1)),
)


# ---- task 6: the model around it ------------------------------------------------------------
def _model_cases(rng: np.random.Generator) -> list[dict]:
    def case(V, T, n_layer, H, G, D, bias, B, L, dtype):
        return {"seed": int(rng.integers(2**31)), "vocab_size": V, "block_size": T,
                "n_layer": n_layer, "n_head": H, "n_kv_head": G, "n_embd": H * D, "bias": bias,
                "dtype": Dtype(dtype), "ids": rng.integers(0, V, size=(B, L))}
    return [case(int(rng.integers(80, 100)), 64, 4, 4, 4, 32, False, 2, int(rng.integers(40, 65)),
                 "float64"),  # the chapter 13 architecture (ch13_mha.pt's shapes)
            case(int(rng.integers(10, 30)), 16, 2, 6, 2, 8, True, 3, 16, "float32"),
            case(int(rng.integers(10, 30)), 12, 3, 4, 1, 6, False, 2, int(rng.integers(4, 12)),
                 "float64")]


def drive_model(cls, seed, vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, bias,
                dtype, ids):
    """CHILD: build ``cls(config)``, load the case's state (no lm_head.weight), return logits."""
    c = gpt_config(vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, bias)
    model = cls(c)
    if not load_state(model, seeded_state(gpt_shapes(c), seed)):
        return torch.empty(0)
    model.to(dtype).eval()
    with torch.no_grad():
        return model(ids.long())


def course_gpt(seed, vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, bias):
    """The course's :class:`~mha_course.gpt.model.GPT` holding the case's state (float64)."""
    from ...gpt.model import GPT
    c = gpt_config(vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, bias)
    model = GPT(c)
    load_state(model, seeded_state(gpt_shapes(c), seed))
    return model.double().eval()


def gpt_variant(model, ids, *, positions=True, final_ln=True, **block_switches):
    """The GPT's forward with one chosen mistake (the defaults equal ``GPT.forward``).

    Shape:
        ids: (B, L). Returns logits (B, L, V).
    """
    x = model.wte(ids)  # (B, L) -> (B, L, E)
    if positions:
        x = x + model.wpe.weight[:ids.shape[1]]  # (B, L, E) + (L, E)
    for block in model.blocks:
        x = block_variant(block, x, **block_switches)
    return model.lm_head(model.ln_f(x) if final_ln else x)  # (B, L, E) -> (B, L, V)


def _model_ref(*case, **switches):
    *sizes, dtype, ids = case
    model = course_gpt(*sizes).to(dtype)
    with torch.no_grad():
        return gpt_variant(model, ids, **switches) if switches else model(ids)


_MODEL_MISTAKES = (
    Mistake("names", NAMES, matches=_names_wrong),
    Mistake("untied read-out", UNTIED, matches=lambda got, case: got.size > 0 and not got.any()),
    Mistake("no position embeddings", NO_POSITIONS, variant=lambda *a: _model_ref(*a, positions=False)),
    Mistake("no final LayerNorm", NO_FINAL_LN, variant=lambda *a: _model_ref(*a, final_ln=False)),
    Mistake("post-norm", POST_NORM, variant=lambda *a: _model_ref(*a, post_norm=True)),
    Mistake("no causal mask", NO_CAUSAL, variant=lambda *a: _model_ref(*a, mask="none")),
)


ITEMS = [
    Item(
        id="ex13_block", notebook=NOTEBOOK, function="Block", points=2,
        task="Block(config): x + attn(ln_1(x)) (causal), then x + mlp(ln_2(x)); the course's names",
        make_cases=_block_cases, shape="(B, L, E)", reference=_block_ref,
        driver="mha_course.grading.chapters.ch13_capstone:drive_block",
        mistakes=_BLOCK_MISTAKES, forbidden=_MODEL,
    ),
    Item(
        id="ex13_gpt", notebook=NOTEBOOK, function="SmallGPT", points=2,
        task="SmallGPT(config): wte + wpe, n_layer Blocks, ln_f, read-out tied to wte -> logits",
        make_cases=_model_cases, shape="(B, L, V)", reference=_model_ref,
        driver="mha_course.grading.chapters.ch13_capstone:drive_model",
        mistakes=_MODEL_MISTAKES, forbidden=_MODEL, uses=("Block",),
    ),
]
