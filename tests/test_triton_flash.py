"""Chapter 17: the Triton FlashAttention-2 kernels, forward and backward, against a float64
reference. Without a GPU they run in Triton's interpreter on CPU (``mha_course.kernels.triton_flash``
sets ``TRITON_INTERPRET=1`` before it defines the kernels); without Triton they are skipped."""

import os

import pytest
import torch

import mha_course.kernels.triton_flash as tf
from mha_course import scaled_dot_product_attention

needs_triton = pytest.mark.skipif(
    not tf.triton_available(), reason='Triton is not installed: pip install -e ".[triton]"'
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The interpreter multiplies float32 exactly; a GPU's float32 tl.dot uses TF32 (10-bit mantissa).
F32_TOL = 1e-5 if tf.interpreted() else 5e-3


def _case(B, H, G, L, S, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, G, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, G, S, D, generator=g, dtype=torch.float64)
    d_out = torch.randn(B, H, L, D, generator=g, dtype=torch.float64)
    return q, k, v, d_out


def _reference(q, k, v, d_out, is_causal):
    """Output and gradients of the course's dense SDPA in float64 (GQA by repeating heads)."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    return (out, *torch.autograd.grad(out, (q, k, v), d_out))


def _kernel(q, k, v, d_out, is_causal, dtype, block_q, block_k):
    q, k, v = (t.to(DEVICE, dtype).requires_grad_() for t in (q, k, v))
    blocks = (block_q, block_k)  # the same ragged tiles for the forward and both backward kernels
    out = tf.triton_flash_attention(
        q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k, backward=(blocks, blocks)
    )
    grads = torch.autograd.grad(out, (q, k, v), d_out.to(DEVICE, dtype))
    return tuple(t.detach().cpu().double() for t in (out, *grads))


# (B, H, G, L, S, D, block_q, block_k): ragged L and S (not multiples of the blocks), L < S and
# L > S, a head size that is not a power of 2 (padded to 16 lanes), MHA, GQA and MQA.
SHAPES = [
    (1, 2, 2, 37, 37, 8, 16, 16),
    (2, 4, 2, 21, 45, 16, 16, 32),
    (1, 3, 1, 50, 19, 12, 32, 16),
    (1, 2, 1, 64, 64, 32, 32, 32),
]


@needs_triton
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}G{}L{}S{}D{}bm{}bn{}".format(*s))
def test_float32_forward_and_gradients(shape, is_causal):
    *dims, block_q, block_k = shape
    q, k, v, d_out = _case(*dims)
    got = _kernel(q, k, v, d_out, is_causal, torch.float32, block_q, block_k)
    for name, g, want in zip(("out", "dq", "dk", "dv"), got, _reference(q, k, v, d_out, is_causal)):
        torch.testing.assert_close(
            g, want, atol=F32_TOL, rtol=F32_TOL, msg=lambda m, n=name: f"{n}: {m}"
        )


@needs_triton
def test_float16_forward_and_gradients():
    q, k, v, d_out = _case(1, 2, 1, 40, 33, 16, seed=1)
    got = _kernel(q, k, v, d_out, True, torch.float16, 16, 16)
    for name, g, want in zip(("out", "dq", "dk", "dv"), got, _reference(q, k, v, d_out, True)):
        torch.testing.assert_close(g, want, atol=1e-2, rtol=1e-2, msg=lambda m, n=name: f"{n}: {m}")


# The version in the message is the installed one (the wrong values were measured with 3.9.0:
# errors of 1e8-1e10 on this test's case), not a number that goes stale when Triton is upgraded.
TRITON_VERSION = getattr(tf.triton, "__version__", "not installed")
BF16_SKIP = (
    f"bfloat16 tl.dot in Triton's CPU interpreter (installed: Triton {TRITON_VERSION}) was "
    "seen giving wrong values (Triton 3.9.0); this test runs on a GPU only"
)


@needs_triton
@pytest.mark.skipif(tf.interpreted(), reason=BF16_SKIP)
def test_bfloat16_on_gpu():
    q, k, v, d_out = _case(1, 2, 1, 64, 64, 32)
    got = _kernel(q, k, v, d_out, True, torch.bfloat16, 32, 32)
    for g, want in zip(got, _reference(q, k, v, d_out, True)):
        torch.testing.assert_close(g, want, atol=5e-2, rtol=5e-2)


def test_the_bfloat16_skip_names_the_installed_triton():
    reasons = [m.kwargs["reason"] for m in test_bfloat16_on_gpu.pytestmark if m.name == "skipif"]
    assert any(f"installed: Triton {TRITON_VERSION}" in r for r in reasons), reasons


@needs_triton
def test_default_backward_blocks_for_wide_heads():
    """D = 128 takes the smaller default backward tiles (backward_blocks); gradients equal the
    float64 reference."""
    assert tf.backward_blocks(128) == ((64, 32), (32, 64))
    q, k, v, d_out = _case(1, 2, 1, 70, 45, 128, seed=2)
    xs = [t.to(DEVICE, torch.float32).requires_grad_() for t in (q, k, v)]
    out = tf.triton_flash_attention(*xs, is_causal=True, block_q=32, block_k=32)
    got = (out, *torch.autograd.grad(out, xs, d_out.to(DEVICE, torch.float32)))
    for name, g, want in zip(("out", "dq", "dk", "dv"), got, _reference(q, k, v, d_out, True)):
        torch.testing.assert_close(
            g.detach().cpu().double(),
            want,
            atol=F32_TOL,
            rtol=F32_TOL,
            msg=lambda m, n=name: f"{n}: {m}",
        )


@needs_triton
def test_log_sum_exp_matches_tiled():
    from mha_course.kernels.tiled import tiled_attention

    q, k, v, _ = _case(1, 2, 2, 30, 27, 8)
    out, lse = tf.triton_forward(
        *(t.float().to(DEVICE) for t in (q, k, v)), is_causal=True, block_q=16, block_k=16
    )
    ref_out, ref_lse = tiled_attention(q, k, v, is_causal=True, return_lse=True)
    out, lse = out.cpu(), lse.cpu()
    torch.testing.assert_close(lse.double(), ref_lse, atol=F32_TOL, rtol=F32_TOL)
    torch.testing.assert_close(out.double(), ref_out, atol=F32_TOL, rtol=F32_TOL)


@needs_triton
def test_bad_inputs_name_the_argument():
    q, k, v, _ = _case(1, 4, 3, 8, 8, 8)
    with pytest.raises(ValueError, match="key/value"):
        tf.triton_flash_attention(q.float(), k.float(), v.float())  # G = 3 does not divide H = 4
    q, k, v, _ = _case(1, 2, 1, 8, 8, 8)
    with pytest.raises(ValueError, match="block_k"):
        tf.triton_flash_attention(q.float(), k.float(), v.float(), block_k=24)


@needs_triton
@pytest.mark.parametrize("L, S", [(5, 0), (0, 5)], ids=["no-keys", "no-queries"])
def test_empty_lengths_give_zeros_like_sdpa(L, S):
    """S = 0: the output is zeros, as torch's and the course's SDPA (not 0 / 0 = NaN); the
    gradients are zeros; L = 0: empty output, zero key/value gradients."""
    q, k, v, d_out = _case(1, 2, 1, L, S, 16)
    got = _kernel(q, k, v, d_out, False, torch.float32, 16, 16)
    for name, g, want in zip(("out", "dq", "dk", "dv"), got, _reference(q, k, v, d_out, False)):
        torch.testing.assert_close(g, want, atol=0, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


def test_without_triton_says_what_to_install(monkeypatch):
    monkeypatch.setattr("mha_course.kernels.triton_setup.triton", None)  # where the check reads it
    q, k, v, _ = _case(1, 1, 1, 4, 4, 4)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[triton\]"'):
        tf.triton_flash_attention(q, k, v)


@needs_triton
def test_triton_imported_before_the_interpreter_is_set_says_how_to_fix():
    """If triton was imported before TRITON_INTERPRET=1 (its library then stays compiled-only),
    calling a kernel on the CPU says what to do instead of the interpreter's obscure error."""
    import subprocess
    import sys

    # The child sees no GPU (CUDA_VISIBLE_DEVICES=""), so on a CUDA machine too it takes the
    # path under test: the module sets the interpreter, too late.
    code = (
        "import os; os.environ.pop('TRITON_INTERPRET', None); import triton, torch; "
        "import mha_course.kernels.triton_flash as tf; q = torch.randn(1, 1, 4, 16)\n"
        "try: tf.triton_flash_attention(q, q, q)\n"
        "except RuntimeError as e: print(e)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {
        "CUDA_VISIBLE_DEVICES": ""
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    ).stdout
    assert "Set TRITON_INTERPRET=1 before anything imports triton" in out
