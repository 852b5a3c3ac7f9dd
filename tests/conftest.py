"""Shared test settings: tolerances for comparisons against the oracles, and the kernels to run.

Import them in a test file with ``from conftest import TOL, TOL64, IMPLS`` (pytest puts this
folder on ``sys.path``, the default ``prepend`` import mode)."""

from __future__ import annotations

import torch

from mha_course.attention.mha import IMPLS as _MHA_IMPLS

# assert_close tolerances by dtype: float64 is tight enough to catch any formula error,
# float32 allows for a different summation order in torch's fused kernels.
TOL = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-5}}
TOL64 = TOL[torch.float64]

# MultiHeadAttention's interchangeable kernels ("eager", "sdpa"), for @pytest.mark.parametrize.
IMPLS = list(_MHA_IMPLS)

# Chapter 17's kernels run in Triton's CPU interpreter here. Triton must see TRITON_INTERPRET=1
# when it is FIRST imported (its own library functions are decorated then), and other test files
# import it early through torch (torch.utils.flop_counter), so set it before any test file loads.
if not torch.cuda.is_available():
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")

# hint() records the levels asked (for `mha-course progress`) in $MHA_COURSE_STATE, by default in
# the home folder: the tests (and the notebook kernels they start) write to a temporary file.
import os as _os  # noqa: E402
import tempfile as _tempfile  # noqa: E402

_os.environ.setdefault(
    "MHA_COURSE_STATE",
    _os.path.join(_tempfile.gettempdir(), f"mha-course-test-hints-{_os.getpid()}.json"),
)
