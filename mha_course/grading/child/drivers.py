"""The code that runs in the CHILD for items with a ``driver``: it builds what the learner's
function or class is called with (a module holding the case's state, a proxy of a model or a
device the parent holds, a whole ring) and calls it. Nothing here computes an item's answer.

Items name their driver as ``"mha_course.grading.child.drivers:<name>"``. The small drivers live
here (the served model and device of ex05 and ex08, ex10's head gradients, ex16's serving loop,
ex12's checkpoint fix); the bigger ones stand beside it in ``child/`` and are named through this
module: ``gpt_drivers`` (ex13's GPT, block, training step and ablation), ``ring_driver`` (ex19's
ring and its wire format) and ``kernel_drivers`` (ex17's Triton kernels). Like every module of
``child/``, they are the only parts of ``mha_course.grading`` a sandbox sees
(``mha_grader/stage.py``): the chapters' items, references and mistakes compute the answers and
are never staged.
"""

from __future__ import annotations

import torch

from mha_course.attention.mha import MultiHeadAttention
from mha_course.grading.child.gpt_drivers import (  # noqa: F401 - the items name these drivers here
    ABLATION_VOCAB,
    _block_config,
    _train_setup,
    ablation_models,
    block_shapes,
    course_gpt,
    drive_ablation,
    drive_block,
    drive_model,
    drive_train,
    gpt_config,
    gpt_shapes,
    load_state,
    seeded_state,
)
from mha_course.grading.child.kernel_drivers import (  # noqa: F401 - the items name these drivers here
    _launch,
    drive_dq_kernel,
    drive_forward_kernel,
)
from mha_course.grading.child.ring_driver import (  # noqa: F401 - the items name these drivers here
    assemble_ring,
    drive_ring,
    from_wire,
    to_wire,
)
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
