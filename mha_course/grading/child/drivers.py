"""The code that runs in the CHILD for items with a ``driver``: it builds what the learner's
function or class is called with (a module holding the case's state, a proxy of a model or a
device the parent holds, a whole ring) and calls it. Nothing here computes an item's answer.

This module, ``served_model``, ``served_device`` and ``seeded`` are the only parts of
``mha_course.grading`` a sandbox sees (``mha_grader/stage.py``): the chapters' items, references
and mistakes compute the answers and are never staged. Items name their driver as
``"mha_course.grading.child.drivers:<name>"``; the chapters import the shared helpers from here.
"""

from __future__ import annotations

import math

import torch

from mha_course.attention.mha import MultiHeadAttention
from mha_course.gpt.config import GPTConfig, TrainConfig
from mha_course.grading.child.seeded import seeded
from mha_course.grading.child.served_device import RemoteDevice
from mha_course.grading.child.served_model import RemoteModel
from mha_grader.sandbox import channel


def drive_generate(fn, seed, num_layers, prompt, n_new):
    """Runs in the CHILD: call the learner with a proxy of the model the PARENT holds.

    ``seed`` is hidden (``None`` here). The parent appends its own verdict on the tokens it was
    fed (``ModelService.judged``): at most P + n_new per sequence, or the loop was the uncached
    O(T²) one.
    """
    with torch.no_grad():
        return fn(RemoteModel(channel.client()), prompt.clone(), int(n_new))


def drive_timer(fn, kernel_ms, jitter, seed, repeats, warmup):
    """Runs in the CHILD: the learner times the grader's device through ``launch``, ``Event`` and
    ``synchronize`` (its kernel times are hidden: ``None`` here). Returns the samples (n,); the
    parent judges them against its own log (``DeviceService.judged``)."""
    device = RemoteDevice(channel.client())
    samples = fn(device.launch, device.Event, device.synchronize, int(repeats), int(warmup))
    return torch.as_tensor(samples, dtype=torch.float64).reshape(-1)  # any shape -> (n,)


def _sequence_loss():
    """The chapter's loss (``sequence_loss`` moves from ``tiny_transformer`` to ``tasks``)."""
    try:
        from mha_course.analysis.tasks import sequence_loss
    except ImportError:  # before the move
        from mha_course.models.tiny_transformer import sequence_loss
    return sequence_loss


def _grads_model(seed, vocab_size, num_layers, num_heads, embed_dim, max_len) -> torch.nn.Module:
    """A float64 TinyTransformer initialised from ``seed`` (same weights in parent and child)."""
    from mha_course.grading.child.seeded import seeded
    from mha_course.models.tiny_transformer import TinyTransformer

    model = TinyTransformer(
        int(vocab_size),
        int(max_len),
        embed_dim=int(embed_dim),
        num_heads=int(num_heads),
        num_layers=int(num_layers),
    )
    return seeded(model, seed).double().eval()  # its own generator: threads cannot disturb it


def drive_head_grads(fn, seed, vocab_size, num_layers, num_heads, embed_dim, tokens, targets):
    """Child side: build the case's model and call ``fn(model, tokens, targets, loss_fn)``."""
    model = _grads_model(seed, vocab_size, num_layers, num_heads, embed_dim, tokens.shape[1])
    return fn(model, tokens.long(), targets.long(), _sequence_loss())


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


def drive_serve(fn, seed, prompts, arrivals, max_new, block_size, num_blocks, num_steps, outputs):
    """CHILD: ex16's model (seeded, its keys/values in a pool of ``num_blocks`` blocks) and the
    trace; ``outputs`` (the dense tokens) is hidden (``None`` here)."""
    from mha_course.grading.child.paged_model import PagedToyLM

    model = PagedToyLM(int(seed), int(num_blocks), int(block_size))
    return fn(
        model,
        prompts.long(),
        arrivals.long(),
        max_new.long(),
        int(block_size),
        int(num_blocks),
        int(num_steps),
    )


def drive_ring(fn, query, key, value, positions, sources, is_causal):
    """Runs in the CHILD: every rank's ring, step by step, through the learner's ``ring_step``.

    ``positions[r]`` are the sequence positions rank r holds, ``sources[r, s]`` the rank whose
    key/value block it holds at step s. The running state starts empty (out 0, lse -inf).

    The keys and values are HIDDEN (``None`` here): the PARENT holds the ring
    (``oracles.ring.RingService``) and hands this process one key/value block at a time, in
    ring order, each only after the state the step before produced (which it checks), as the
    block would arrive from the neighbour rank. So no frame of this process holds the whole
    sequence's keys and values for a step to read, and a step must merge what it was given.

    Shape:
        query: (B, H, T, D). Returns out (B, H, T, Dv), lse (B, H, T) (the parent appends
        whether every intermediate state was right).
    """
    ring = channel.client()
    P, scale = positions.shape[0], 1.0 / float(query.shape[-1]) ** 0.5
    parts = {}
    for r in range(P):
        qp = positions[r]
        state = None  # empty: the first block defines Dv
        for s in range(P + 1):
            got = ring.call(
                "block",
                rank=r,
                step=s,
                out=None if state is None else to_wire(state[0]),
                lse=None if state is None else to_wire(state[1]),
            )
            if s == P:
                break
            k = torch.tensor(from_wire(got["key"]), dtype=query.dtype)
            v = torch.tensor(from_wire(got["value"]), dtype=query.dtype)
            if state is None:
                state = (
                    query.new_zeros(*query.shape[:-2], len(qp), v.shape[-1]),  # (B, H, T/P, Dv)
                    query.new_full((*query.shape[:-2], len(qp)), float("-inf")),
                )  # (B, H, T/P)
            kp = positions[int(sources[r, s])]
            state = fn(
                state[0],
                state[1],
                query[..., qp, :].clone(),
                k,
                v,
                qp.clone(),
                kp.clone(),
                bool(is_causal),
                scale,
            )
        parts[r] = state
    return assemble_ring(query, positions, parts)


def assemble_ring(query, positions, parts):
    """Each rank's final (out, lse) put back at its positions: (B, H, T, Dv), (B, H, T)."""
    dv = parts[0][0].shape[-1]
    out_all = query.new_zeros(*query.shape[:-1], dv)
    lse_all = query.new_zeros(query.shape[:-1])
    for r, (out, lse) in parts.items():
        out_all[..., positions[r], :], lse_all[..., positions[r]] = out, lse
    return out_all, lse_all


_SPECIAL = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def to_wire(t) -> list:
    """A tensor as nested JSON lists; non-finite numbers as the strings "inf", "-inf", "nan"
    (the channel's JSON has no such constants)."""

    def enc(x):
        if isinstance(x, list):
            return [enc(y) for y in x]
        return x if math.isfinite(x) else ("nan" if x != x else ("inf" if x > 0 else "-inf"))

    return enc(torch.as_tensor(t).detach().double().tolist())


def from_wire(x):
    """``to_wire``'s lists back to nested lists of floats; ``ValueError`` on anything else."""
    if isinstance(x, list):
        return [from_wire(y) for y in x]
    if isinstance(x, str) and x in _SPECIAL:
        return _SPECIAL[x]
    if type(x) in (int, float):
        return float(x)
    raise ValueError(f"expected a number or one of {sorted(_SPECIAL)}, got {type(x).__name__}")


def drive_forward_kernel(kernel, query, key, value, is_causal, block_q, block_k):
    """Run in the sandbox: launch the learner's ``kernel`` with :func:`launch_forward`; on the
    CPU that is Triton's interpreter (``TRITON_INTERPRET=1``, set by the exercise's first cell).

    The interpreter wraps whatever the kernel raised in its ``InterpreterError``; the learner's
    own exception (a ``NotImplementedError`` of the stub, a forbidden call, an ``IndexError`` at
    a line of their cell) is raised instead, so the feedback names it and where it happened.
    """
    from mha_course.kernels.triton_flash import launch_forward

    out, lse = _launch(launch_forward, kernel, (query, key, value), is_causal, block_q, block_k)
    return out.cpu(), lse.cpu()


def drive_dq_kernel(kernel, query, key, value, out, lse, d_out, is_causal, block_q, block_k):
    """Run in the sandbox: launch the learner's dQ ``kernel`` with :func:`launch_dq` on the
    forward's saved O and lse (D = rowsum(dO ∘ O) is the launcher's); the learner's own
    exception is raised out of the interpreter's wrapper, as in :func:`drive_forward_kernel`.

    Shape:
        query, out, d_out: (B, H, L, D); key, value: (B, G, S, D); lse: (B, H, L).
        Returns dQ (B, H, L, D).
    """
    from mha_course.kernels.triton_dq import launch_dq

    return _launch(
        launch_dq, kernel, (query, key, value, out, lse, d_out), is_causal, block_q, block_k
    ).cpu()


def _launch(launcher, kernel, tensors, is_causal, block_q, block_k):
    """``launcher(kernel, *tensors, is_causal, None, block_q, block_k)`` on the kernels' device
    (the CPU under the interpreter), re-raising the learner's exception from the wrapper. The
    kernel must be a ``@triton.jit`` function: any object with ``[grid]`` would be launched, so
    a torch function dressed as one (its ``__getitem__`` returning it) is refused here."""
    from triton.runtime.jit import KernelInterface

    from mha_course.kernels.triton_flash import interpreted

    if not isinstance(kernel, KernelInterface):
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")

    device = "cuda" if torch.cuda.is_available() and not interpreted() else "cpu"
    args = [t.to(device) for t in tensors]
    try:
        return launcher(kernel, *args, bool(is_causal), None, int(block_q), int(block_k))
    except Exception as e:
        if type(e).__name__ == "InterpreterError" and e.__cause__ is not None:
            raise e.__cause__ from None
        raise


def _exporter(seed, embed_dim, num_heads, num_kv_heads) -> MultiHeadAttention:
    """The model the checkpoint came from: float64, RoPE "interleaved", weights from ``seed``."""
    m = MultiHeadAttention(
        int(embed_dim),
        int(num_heads),
        num_kv_heads=int(num_kv_heads),
        rope="interleaved",
        dtype=torch.float64,
    )
    return seeded(m, seed).eval()


def _run_half(state: dict, embed_dim, num_heads, num_kv_heads, x: torch.Tensor) -> tuple:
    """Load ``state`` into the 'half' model (strict) and run causal self-attention on x; also
    return the q/k weights it loaded, so that the parent judges the fix itself, not only a forward
    pass that runs in the learner's process (which could patch the model's RoPE).

    Shape:
        x: (B, L, E). Returns (B, L, E), W_Q (H * D, E), W_K (G * D, E).
    """
    m = MultiHeadAttention(
        int(embed_dim),
        int(num_heads),
        num_kv_heads=int(num_kv_heads),
        rope="half",
        dtype=torch.float64,
    ).eval()
    m.load_state_dict(state)
    with torch.no_grad():
        y = m(x, x, x, is_causal=True, need_weights=False)[0]
    return y, m.q_proj.weight.detach().clone(), m.k_proj.weight.detach().clone()


def drive_fix(fn, seed, embed_dim, num_heads, num_kv_heads, x):
    """Child side: ``fn(state_dict, num_heads, num_kv_heads)`` -> the state dict the model loads."""
    exported = {
        k: v.clone()
        for k, v in _exporter(seed, embed_dim, num_heads, num_kv_heads).state_dict().items()
    }
    fixed = fn(exported, int(num_heads), int(num_kv_heads))
    if not isinstance(fixed, dict):
        raise TypeError(
            f"fix_checkpoint: expected a state dict (dict of name -> tensor), got "
            f"{type(fixed).__name__}"
        )
    return _run_half(fixed, embed_dim, num_heads, num_kv_heads, x)
