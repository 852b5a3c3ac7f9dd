"""Chapter 13's drivers, run in the CHILD: the course's GPT and its ``Block`` built from the case's
config and a seeded state (:func:`seeded_state`, the same float64 values in parent and child), the
learner's ``Block``/``GPT`` loaded with that state and run (``drive_block``, ``drive_model``), the
training step on the course's GPT (``drive_train``), and the models of a KV-cache ablation
(``drive_ablation``). Items name them through :mod:`mha_course.grading.child.drivers`.
"""

from __future__ import annotations

import math

import torch

from mha_course.gpt.config import GPTConfig, TrainConfig


def gpt_config(vocab_size, context_length, n_layer, n_head, n_kv_head, n_embd, bias) -> GPTConfig:
    """The case's model config (learned positions, no dropout, tied read-out)."""
    G = int(n_kv_head)
    return GPTConfig(
        vocab_size=int(vocab_size),
        context_length=int(context_length),
        n_layer=int(n_layer),
        n_head=int(n_head),
        n_kv_head=None if G == int(n_head) else G,
        n_embd=int(n_embd),
        bias=bool(bias),
        dropout=0.0,
    )


def _block_config(n_head, n_kv_head, n_embd, bias, L) -> GPTConfig:
    return gpt_config(2, L, 1, n_head, n_kv_head, n_embd, bias)


def block_shapes(c: GPTConfig, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """``Block``'s state_dict names and shapes (E = n_embd, G·D the key/value width)."""
    E, W, F4 = c.n_embd, c.kv_heads * c.head_dim, c.mlp_ratio * c.n_embd
    linears = {
        "attn.q_proj": (E, E),
        "attn.k_proj": (W, E),
        "attn.v_proj": (W, E),
        "attn.out_proj": (E, E),
        "mlp.fc": (F4, E),
        "mlp.proj": (E, F4),
    }
    out: dict[str, tuple[int, ...]] = {}
    for norm, layers in (
        ("ln_1", ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj")),
        ("ln_2", ("mlp.fc", "mlp.proj")),
    ):
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
    out = {"wte.weight": (c.vocab_size, c.n_embd), "wpe.weight": (c.context_length, c.n_embd)}
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
    if extra or any(
        k not in own or tuple(own[k].shape) != tuple(v.shape) for k, v in state.items()
    ):
        return False
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
        for k, v in state.items():
            own[k].copy_(v)
    return True


def course_gpt(seed, vocab_size, context_length, n_layer, n_head, n_kv_head, n_embd, bias):
    """The course's :class:`~mha_course.gpt.model.GPT` holding the case's state (float64)."""
    from mha_course.gpt.model import GPT

    c = gpt_config(vocab_size, context_length, n_layer, n_head, n_kv_head, n_embd, bias)
    model = GPT(c)
    load_state(model, seeded_state(gpt_shapes(c), seed))
    return model.double().eval()


def drive_block(cls, seed, n_head, n_kv_head, n_embd, bias, x):
    """CHILD: build ``cls(config)``, load the case's state, return its output on ``x``."""
    c = _block_config(n_head, n_kv_head, n_embd, bias, x.shape[1])
    block = cls(c)
    if not load_state(block, seeded_state(block_shapes(c), seed)):
        return torch.empty(0)
    block.to(x.dtype).eval()
    with torch.no_grad():
        return block(x)


def drive_model(
    cls, seed, vocab_size, context_length, n_layer, n_head, n_kv_head, n_embd, bias, dtype, ids
):
    """CHILD: build ``cls(config)``, load the case's state (no lm_head.weight), return logits."""
    c = gpt_config(vocab_size, context_length, n_layer, n_head, n_kv_head, n_embd, bias)
    model = cls(c)
    if not load_state(model, seeded_state(gpt_shapes(c), seed)):
        return torch.empty(0)
    model.to(dtype).eval()
    with torch.no_grad():
        return model(ids.long())


def _train_setup(
    seed,
    vocab_size,
    n_layer,
    n_head,
    n_embd,
    learning_rate,
    min_lr,
    warmup_iters,
    max_iters,
    lr_decay_iters,
    grad_clip,
    weight_decay,
    context_length,
):
    model = course_gpt(
        seed, vocab_size, context_length, n_layer, n_head, n_head, n_embd, False
    ).train()
    tc = TrainConfig(
        batch_size=1,
        max_iters=int(max_iters),
        learning_rate=float(learning_rate),
        min_lr=float(min_lr),
        warmup_iters=int(warmup_iters),
        lr_decay_iters=None if lr_decay_iters is None else int(lr_decay_iters),
        weight_decay=float(weight_decay),
        grad_clip=float(grad_clip),
        dtype="float64",
    )
    return model, tc


def drive_train(fn, *case):
    """CHILD: the course's GPT from the case's state; ``fn(model, tc, xs, ys, start)``."""
    *setup, start, xs, ys = case
    model, tc = _train_setup(*setup, xs.shape[-1])
    return fn(model, tc, xs.long(), ys.long(), int(start))


def ablation_models(n_layer, heads, kv_heads, latent, n_embd, dtype, context_length) -> list:
    """The course's GPTs of an ablation, one per row: ``heads[i]`` query heads at width
    ``n_embd``, ``kv_heads[i]`` key/value heads (0: MLA with a latent of ``latent[i]``). Their
    weights do not matter to what is measured (the cache's bytes), so they are the default ones."""
    from mha_course.gpt.model import GPT

    models = []
    for H, G, C in zip(heads.tolist(), kv_heads.tolist(), latent.tolist()):
        c = GPTConfig(
            vocab_size=ABLATION_VOCAB,
            context_length=int(context_length),
            n_layer=int(n_layer),
            n_head=H,
            n_kv_head=None if G in (0, H) else G,
            n_embd=int(n_embd),
            attention="mla" if G == 0 else "mha",
            kv_latent_dim=C if G == 0 else None,
        )
        models.append(GPT(c).to(dtype).eval())
    return models


ABLATION_VOCAB = 50


def drive_ablation(fn, n_layer, heads, kv_heads, latent, n_embd, dtype, ids):
    """CHILD: the ablation's models; ``fn(models, ids)`` -> (measured (n,), predicted (n,))."""
    models = ablation_models(n_layer, heads, kv_heads, latent, n_embd, dtype, ids.shape[1])
    with torch.no_grad():
        return fn(models, ids.long())
