"""Chapter 17's drivers, run in the sandbox: the learner's ``@triton.jit`` forward and dQ kernels
launched by the course's launchers (``launch_forward``, ``launch_dq``), under Triton's
interpreter on the CPU; the learner's own exception is raised out of the interpreter's wrapper.
Triton is imported on first use (the optional extra). Items name them through
:mod:`mha_course.grading.child.drivers`.
"""

from __future__ import annotations

import torch


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
