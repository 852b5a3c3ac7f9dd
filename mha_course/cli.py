"""The ``mha-course`` console script. Each subcommand lives in ``mha_course/commands/<name>.py``."""

from __future__ import annotations

import argparse
import importlib
import sys

from mha_course import __version__

# Subcommands in the order --help lists them; each is mha_course/commands/<name>.py.
COMMANDS = (
    "check",
    "progress",
    "hint",
    "grade",
    "merge",
    "export",
    "report",
    "similarity",
    "release",
    "handout",
    "bench",
    "train",
    "generate",
    "info",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mha-course",
        description="Multi-head attention course: check your exercises, grade a class, "
        "regenerate exercises, run benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"mha-course {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"mha_course.commands.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
