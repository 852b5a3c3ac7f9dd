"""ex17 (optional dQ kernel): no Triton at all: an object whose ``[grid]`` returns a torch function
that writes the right dQ (autograd of attention it wrote with torch ops, none of them forbidden).
Before the driver checked the kernel's type this scored 3/3.
Before: the driver refused it (TypeError); since the Triton items run only the notebook's
@triton.jit definitions (issue #30, route 3), the object is not one: no kernel at all."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_triton_dq": """
import torch


class _Launch:
    def __getitem__(self, grid):
        def run(q, k, v, do, lse, delta, dq, scale, L, S, D, H, G, IS_CAUSAL, **blocks):
            kk, vv = (t.repeat_interleave(H // G, dim=1).double() for t in (k, v))
            with torch.enable_grad():
                q64 = q.double().requires_grad_()
                s = q64 @ kk.transpose(-2, -1) * scale
                if IS_CAUSAL:
                    s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
                (g,) = torch.autograd.grad(torch.softmax(s, -1) @ vv, q64, do.double())
            dq.copy_(g)
        return run


flash_dq_kernel = _Launch()
"""
}
EXPECT = {"ex17_triton_dq": ("missing function", "flash_dq_kernel")}
