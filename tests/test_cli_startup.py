"""The commands that only read or print start without torch (issue 33: a second of CPU per call,
paid by every `mha-course hint` a learner types and every CLI round trip of the test suite), and
the lazy parser still parses every subcommand's own arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mha_course.cli import COMMANDS, build_parser

PROBE = """import sys
from mha_course.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("torch imported:", "torch" in sys.modules)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["hint", "ex04", "3"],
        ["hint", "ex04"],
        ["grade", "--help"],
        ["report", "--help"],
    ],
)
def test_reading_commands_start_without_torch(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip().endswith("torch imported: False"), done.stdout + done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_line_gets_its_commands_own_arguments(command: str) -> None:
    lazy = build_parser(command)._subparsers._group_actions[0].choices[command]
    full = build_parser()._subparsers._group_actions[0].choices[command]
    assert [a.dest for a in lazy._actions] == [a.dest for a in full._actions]


def test_other_commands_are_listed_without_their_arguments() -> None:
    choices = build_parser("hint")._subparsers._group_actions[0].choices
    assert set(choices) == set(COMMANDS)
    assert [a.dest for a in choices["train"]._actions] == ["help"]
