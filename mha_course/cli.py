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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; with ``command``, only that one's own arguments are
    added (the others are listed, by their help line). A command line names one subcommand, and
    the arguments of ``train`` come from chapter 13's configs, which import torch: a second of CPU
    that ``mha-course --help``, ``hint`` or ``grade`` need not spend. ``command=""``: none.
    """
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
        if command is None or name == command:
            module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # the subcommand is the first word that is not an option (the top level's options,
    # --help and --version, take no value)
    named = next((a for a in argv if not a.startswith("-")), "")
    parser = build_parser(named if named in COMMANDS else "")
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
