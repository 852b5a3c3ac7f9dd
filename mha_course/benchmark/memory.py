"""Chapter 9 (used again in 19): peak tensor memory of a call, measured with torch's profiler.

Where the rest of measuring lives (chapter 8's timing harness is :mod:`.timing`): chapter 9
compares the naive and tiled attention's peaks with it, chapter 19 each ring rank's. It is
defined in :mod:`mha_course.device` (the package's face, so the kernels import it down); this
module re-exports it.
"""

from mha_course.device import peak_memory_bytes

__all__ = ["peak_memory_bytes"]
