"""``mha-course info``: versions and the device the course will use."""

from __future__ import annotations

import argparse
import platform

HELP = "print the versions and the device the course will use"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import numpy
    import torch

    from mha_course import __version__
    from mha_course.device import describe_device

    print(f"mha-course {__version__}")
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, numpy {numpy.__version__}"
    )
    print(f"device: {describe_device()}")
    return 0
