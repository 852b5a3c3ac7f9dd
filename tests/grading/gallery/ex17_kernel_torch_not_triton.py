"""ex17: no Triton at all: an object whose ``[grid]`` returns a torch function that writes the
right O and lse (attention written with torch ops, none of them forbidden). Before the driver
checked the kernel's type this scored 5/5.
Before: the driver refused it (TypeError); since the Triton items run only the notebook's
@triton.jit definitions (issue #30, route 3), the object is not one: no kernel at all."""

NOTEBOOK = "ex17"
REPLACE = {
    "ex17_triton_forward": """
import torch


class _Launch:
    def __getitem__(self, grid):
        def run(q, k, v, out, lse, scale, L, S, D, H, G, IS_CAUSAL, **blocks):
            kk, vv = (t.repeat_interleave(H // G, dim=1).double() for t in (k, v))
            s = q.double() @ kk.transpose(-2, -1) * scale
            if IS_CAUSAL:
                s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
            out.copy_(torch.softmax(s, -1) @ vv)
            lse.copy_(torch.logsumexp(s, -1))
        return run


flash_fwd_kernel = _Launch()
"""
}
EXPECT = {"ex17_triton_forward": ("missing function", "flash_fwd_kernel")}
