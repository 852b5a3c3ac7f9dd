"""Shared test settings: tolerances for comparisons against the oracles, and the kernels to run.

Import them in a test file with ``from conftest import TOL, TOL64, IMPLS`` (pytest puts this
folder on ``sys.path``, the default ``prepend`` import mode)."""

from __future__ import annotations

import torch

from mha_course.mha import IMPLS as _MHA_IMPLS

# assert_close tolerances by dtype: float64 is tight enough to catch any formula error,
# float32 allows for a different summation order in torch's fused kernels.
TOL = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-5}}
TOL64 = TOL[torch.float64]

# MultiHeadAttention's interchangeable kernels ("eager", "sdpa"), for @pytest.mark.parametrize.
IMPLS = list(_MHA_IMPLS)
