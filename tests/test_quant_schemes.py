"""Chapter 16's engine schemes: asymmetric grouped codes, KIVI's cache, FP8 e4m3 — against
independent float64 references written here from the papers' definitions."""

import pytest
import torch
from torch.testing import assert_close

from mha_course.caches.quant_schemes import (
    FP8_MAX,
    KIVICache,
    fake_quant_asymmetric,
    fake_quant_fp8,
    scheme_bytes_per_token,
)


def _asym_ref(x: torch.Tensor, bits: int) -> torch.Tensor:
    """One group (a 1-D tensor), element by element."""
    lo, hi = float(x.min()), float(x.max())
    s = (hi - lo) / (2**bits - 1)
    return torch.tensor(
        [lo + s * min(max(round((v - lo) / s), 0), 2**bits - 1) for v in x.tolist()],
        dtype=torch.float64,
    )


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_asymmetric_per_token_and_grouped_per_channel_match_the_definition(bits):
    torch.manual_seed(0)
    x = (
        torch.randn(2, 3, 8, 5, dtype=torch.float64) + 3
    )  # offset: asymmetric codes use it, absmax would not
    tok = fake_quant_asymmetric(x, "token", bits)
    ch = fake_quant_asymmetric(x, "channel", bits, group=4)
    for b in range(2):
        for g in range(3):
            for s in range(8):
                assert_close(tok[b, g, s], _asym_ref(x[b, g, s], bits), rtol=0, atol=1e-12)
            for start in (0, 4):
                for d in range(5):
                    assert_close(
                        ch[b, g, start : start + 4, d],
                        _asym_ref(x[b, g, start : start + 4, d], bits),
                        rtol=0,
                        atol=1e-12,
                    )
    step = (x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True)) / (2**bits - 1)
    assert ((tok - x).abs() <= step / 2 + 1e-12).all()
    # the group's extremes are exact: all 2^b levels span [min, max]
    assert_close(tok.amax(-1), x.amax(-1), rtol=0, atol=1e-12)
    assert_close(tok.amin(-1), x.amin(-1), rtol=0, atol=1e-12)


def test_asymmetric_rejects_bad_arguments():
    x = torch.randn(1, 1, 6, 4)
    with pytest.raises(ValueError, match="group"):
        fake_quant_asymmetric(x, "channel", 4, group=4)
    with pytest.raises(ValueError, match="bits"):
        fake_quant_asymmetric(x, "token", 5)
    with pytest.raises(ValueError, match="axis"):
        fake_quant_asymmetric(x, "row", 4)
    with pytest.raises(ValueError, match=r"\(B, G, S, D\)"):
        fake_quant_asymmetric(x[0], "token", 4)


@pytest.mark.parametrize("over", ["tensor", "head"])
def test_fp8_is_e4m3_after_the_scale(over):
    torch.manual_seed(1)
    x = (
        torch.randn(2, 3, 7, 4, dtype=torch.float64)
        * torch.tensor([1.0, 10.0, 0.01], dtype=torch.float64)[:, None, None]
    )
    y = fake_quant_fp8(x, over)
    dims = (0, 1, 2, 3) if over == "tensor" else (2, 3)
    s = x.abs().amax(dims, keepdim=True) / FP8_MAX
    assert_close(y, (x / s).to(torch.float8_e4m3fn).double() * s, rtol=0, atol=0)
    assert_close(
        y.abs().amax(dims), x.abs().amax(dims), rtol=1e-15, atol=0
    )  # the max maps to 448 exactly
    normal = (x / s).abs() >= 2**-6  # e4m3's smallest normal
    assert ((y - x).abs()[normal] <= (x.abs() * 2**-4)[normal] + 1e-15).all()  # 3 mantissa bits


def test_fp8_per_head_scale_keeps_a_small_head_that_per_tensor_flushes():
    x = torch.ones(1, 2, 4, 4, dtype=torch.float64)
    x[:, 1] *= 1e-6  # a head a million times smaller than the other
    assert (
        fake_quant_fp8(x, "tensor")[:, 1] == 0
    ).all()  # below e4m3's smallest subnormal once scaled
    assert_close(fake_quant_fp8(x, "head"), x, rtol=0, atol=0)


def test_kivi_cache_keeps_the_residual_in_full_precision_and_quantizes_the_rest():
    torch.manual_seed(2)
    B, G, D, bits, group, residual = 2, 2, 8, 2, 4, 8
    cache = KIVICache(bits, group, residual)
    ks, vs = (
        torch.randn(B, G, 21, D, dtype=torch.float64),
        torch.randn(B, G, 21, D, dtype=torch.float64),
    )
    t = 0
    for n in (3, 1, 6, 1, 1, 9):  # chunks and single steps
        k, v = cache.update(ks[:, :, t : t + n], vs[:, :, t : t + n])
        t += n
        n_kq = t // residual * residual  # keys in completed residual blocks
        want_k = torch.cat(
            [fake_quant_asymmetric(ks[:, :, :n_kq], "channel", bits, group), ks[:, :, n_kq:t]], 2
        )
        n_vq = max(t - residual, 0)
        want_v = torch.cat(
            [fake_quant_asymmetric(vs[:, :, :n_vq], "token", bits), vs[:, :, n_vq:t]], 2
        )
        assert_close(k, want_k, rtol=0, atol=0)
        assert_close(v, want_v, rtol=0, atol=0)
        assert cache.length == t and cache.full_precision_tokens == (t - n_kq, t - n_vq)
    assert (k[:, :, :16] != ks[:, :, :16]).any() and torch.equal(k[:, :, 16:], ks[:, :, 16:21])


def test_kivi_cache_checks_its_arguments():
    with pytest.raises(ValueError, match="residual"):
        KIVICache(4, group=16, residual=24)
    with pytest.raises(ValueError, match="group"):
        KIVICache(4, group=0)
    with pytest.raises(ValueError, match="bits"):
        KIVICache(5)


def test_bytes_per_token():
    assert scheme_bytes_per_token(128, 4, 1) == 66  # int4 codes + one fp16 scale
    assert (
        scheme_bytes_per_token(128, 2, 2 * 128 / 32) == 32 + 16
    )  # KIVI-2 keys, group 32: 8 fp16 numbers per token
