"""One device helper for the whole course: CUDA when present, else CPU."""

from __future__ import annotations

import torch


def get_device(prefer: str | None = None) -> torch.device:
    """Return ``cuda`` when a GPU is available (or ``prefer`` says so), else ``cpu``.

    Nothing in the course requires a GPU; pass ``prefer="cpu"`` to force the CPU.
    """
    if prefer is not None:
        if prefer.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"prefer: asked for {prefer!r} but torch sees no CUDA device")
        return torch.device(prefer)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe_device(device: torch.device | str | None = None) -> str:
    """A one-line hardware banner, e.g. ``cuda: NVIDIA H200`` or ``cpu: 2 threads``."""
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {torch.get_num_threads()} threads"
