"""Exercise 17's kernels written in plain torch (issue #30, route 3): a real ``@triton.jit``
function whose body, under ``TRITON_INTERPRET=1``, is ordinary Python that reaches the grader's
tensors without a ``tl.load`` (the launcher's frame, or the tensors themselves) and writes the
answer with float64 torch. Each case names how its body reaches them (``FIND``); before the items
compiled the kernel first (``mha_course/grading/child/triton_compile.py``) these scored 5/5 and 3/3.

Not a gallery case itself (the gallery reads ``ex*.py``); its cases load it with ``runpy``."""

from __future__ import annotations

_HEAD = """
import triton
import triton.language as tl
{module_level}

@triton.jit
def {name}({params}IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr):
{find}
    torch = __import__("torch")
    H, G, L, S = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    kk, vv = (torch.nan_to_num(t.repeat_interleave(H // G, dim=1).double()) for t in (k, v))
"""
_FORWARD = """
    s = q.double() @ kk.transpose(-2, -1) * q.shape[-1] ** -0.5
    if IS_CAUSAL:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    out.copy_(torch.softmax(s, -1) @ vv)
    lse.copy_(torch.logsumexp(s, -1))
"""
_DQ = """
    with torch.enable_grad():
        q64 = q.double().requires_grad_()
        s = q64 @ kk.transpose(-2, -1) * q.shape[-1] ** -0.5
        if IS_CAUSAL:
            s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
        (g,) = torch.autograd.grad(torch.softmax(s, -1) @ vv, q64, do.double())
    dq.copy_(g)
"""
# How the body reaches the launcher's locals (``launch_forward``: q, k, v, out, lse;
# ``launch_dq``: also do, dq), each a frame ``f`` walked up to the one that holds them.
_WALK = """
    while "lse" not in f.f_locals or "q" not in f.f_locals:
        f = f.f_back
    q, k, v, lse = (f.f_locals[n] for n in ("q", "k", "v", "lse"))
    out, dq, do = (f.f_locals.get(n) for n in ("out", "dq", "do"))
"""
FIND = {
    "getframe": '    f = __import__("sys")._getframe()' + _WALK,
    "inspect": '    f = __import__("inspect").stack(0)[0].frame' + _WALK,
    "traceback": """
    try:
        raise RuntimeError("a frame, please")
    except RuntimeError as e:
        f = e.__traceback__.tb_frame
"""
    + _WALK,
    # No frame at all: the tensors whose storage the pointer arguments point at, found by the
    # garbage collector (the interpreter passes CPU tensors' own storage).
    "gc": """
    gc, torch = __import__("gc"), __import__("torch")
    ptr = {int(X.handle.data.item()): n for n, X in (("q", Q), ("k", K), ("v", V), ("out", Out), ("lse", LSE))}
    got = {ptr[t.data_ptr()]: t for t in gc.get_objects() if isinstance(t, torch.Tensor) and t.data_ptr() in ptr}
    q, k, v, out, lse = (got[n] for n in ("q", "k", "v", "out", "lse"))
""",
}
FORWARD_PARAMS = "Q, K, V, Out, LSE, scale, L, S, D, H, G,\n        "
DQ_PARAMS = "Q, K, V, DO, LSE, DELTA, DQ, scale, L, S, D, H, G,\n        "


def torch_kernel(find: str, dq: bool = False, module_level: str = "") -> str:
    """The cell: a ``@triton.jit`` kernel whose body is torch, reaching its tensors by ``find``."""
    return _HEAD.format(
        module_level=module_level,
        name="flash_dq_kernel" if dq else "flash_fwd_kernel",
        params=DQ_PARAMS if dq else FORWARD_PARAMS,
        find=FIND[find],
    ) + (_DQ if dq else _FORWARD)
