"""``mha-course merge OUT_1 OUT_2 ... --out OUT``: join shard gradebooks into one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "merge the OUT folders of `grade --shard K/N` runs into one gradebook"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("parts", type=Path, nargs="+", help="OUT folders of the shards")
    parser.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from mha_grader.classroom import merge

    try:
        rows = merge(args.parts, args.out)
    except (OSError, ValueError, KeyError) as e:
        print(f"merge: {e}", file=sys.stderr)
        return 1
    print(f"merged {len(rows)} student(s) from {len(args.parts)} shard(s) -> {args.out / 'grades.csv'}")
    return 0
