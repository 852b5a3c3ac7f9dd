"""``mha-course merge OUT_1 OUT_2 ... --out OUT``: join shard gradebooks into one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = (
    "merge the OUT folders of `grade --shard K/N` runs into one gradebook (all N shards, one key); "
    "--replace puts a regrade of some students into a gradebook"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "parts",
        type=Path,
        nargs="+",
        help="OUT folders of the shards (every one of 1/N ... N/N); with --replace: "
        "the gradebook first, then the regrade folder(s)",
    )
    parser.add_argument("--out", type=Path, required=True, help="where the merged gradebook goes")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="the first folder is a whole gradebook; each later one a regrade of some "
        "students (same key, same items) whose rows replace theirs; OUT (a new "
        "folder) gets changes.csv, every item whose points changed",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from mha_grader.classroom import merge

    for part in args.parts:
        if not part.is_dir():
            print(
                f"merge: parts: expected OUT folders of `mha-course grade`, got {str(part)!r} "
                f"(not a folder)",
                file=sys.stderr,
            )
            return 2
    try:
        rows = merge(args.parts, args.out, replace=args.replace)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"merge: refused: {e}", file=sys.stderr)
        return 2
    if not args.replace:
        print(
            f"merged {len(rows)} student(s) from {len(args.parts)} shard(s) -> {args.out / 'grades.csv'}"
        )
        return 0
    replaced = json.loads((args.out / "grading.json").read_text(encoding="utf-8"))["replaced"]
    for s, r in sorted(replaced.items()):
        before = "new" if r["total before"] is None else f"{r['total before']:g}"
        print(
            f"replaced {s}: total {before} -> {r['total after']:g}, {r['items changed']} item(s) changed "
            f"(from {r['from']})"
        )
    print(
        f"{len(rows)} student(s), {len(replaced)} replaced -> {args.out / 'grades.csv'}; "
        f"what changed: {args.out / 'changes.csv'}"
    )
    return 0
