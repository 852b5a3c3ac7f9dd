"""Chapter 8: the roofline's two numbers — a device's dense peak FLOP/s and memory bandwidth.

Vendor datasheet figures (dense, i.e. without 2:4 sparsity, at boost clock), keyed by the name
``torch.cuda.get_device_name`` reports. They are the *ceiling*, never a measurement: results
quote "% of peak" against them. Unknown devices get ``None`` and no percentage is printed.
"""

from __future__ import annotations

import torch

# (substring of the device name, {dtype: dense peak TFLOP/s}, memory bandwidth GB/s).
# The most specific names come first; fp32 is the non-tensor-core rate.
KNOWN_PEAKS: tuple[tuple[str, dict[str, float], float], ...] = (
    ("H200", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}, 4800.0),
    ("H100 PCIe", {"bfloat16": 756.0, "float16": 756.0, "float32": 51.0}, 2000.0),
    ("H100", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}, 3350.0),
    ("A100-SXM4-80GB", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, 2039.0),
    ("A100 80GB PCIe", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, 1935.0),
    ("A100", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}, 1555.0),
    ("L40S", {"bfloat16": 362.0, "float16": 362.0, "float32": 91.6}, 864.0),
    ("L4", {"bfloat16": 121.0, "float16": 121.0, "float32": 30.3}, 300.0),
    ("T4", {"float16": 65.0, "float32": 8.1}, 320.0),
    ("RTX 4090", {"bfloat16": 165.2, "float16": 165.2, "float32": 82.6}, 1008.0),
)


def dtype_name(dtype: torch.dtype | str) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def lookup_peak(device_name: str, dtype: torch.dtype | str) -> tuple[float | None, float | None]:
    """(dense peak FLOP/s, bandwidth bytes/s) for a device name and dtype, ``None`` if unknown.

    >>> lookup_peak("NVIDIA H100 80GB HBM3", "bfloat16")
    (989000000000000.0, 3350000000000.0)
    """
    for key, tflops, gbps in KNOWN_PEAKS:
        if key in device_name:
            peak = tflops.get(dtype_name(dtype))
            return (peak * 1e12 if peak is not None else None), gbps * 1e9
    return None, None


def percent_of_peak(
    flops: float, seconds: float, device_name: str, dtype: torch.dtype | str
) -> float | None:
    """Achieved FLOP/s as a percentage of the device's dense peak, ``None`` if the peak is unknown."""
    peak, _ = lookup_peak(device_name, dtype)
    if peak is None or seconds <= 0:
        return None
    return 100.0 * flops / seconds / peak
