"""The package imports and the console script answers."""

import subprocess
import sys

import torch

import mha_course


def test_public_api_names():
    for name in ("scaled_dot_product_attention", "MultiHeadAttention", "KVCache"):
        assert hasattr(mha_course, name), name


def test_cli_help():
    out = subprocess.run(
        [sys.executable, "-m", "mha_course.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "mha-course" in out


def test_mha_runs():
    out, w = mha_course.MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), need_weights=True)
    assert out.shape == (1, 3, 8) and w.shape == (1, 2, 3, 3)
