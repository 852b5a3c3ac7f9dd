"""The tail every experiment script shares: stamp and write its result file, and its command line.

Each script under ``mha_course.experiments`` has a ``run(...) -> dict`` that measures, then calls
:func:`write_result`; its ``main`` is one call to :func:`run_main`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from mha_course.benchmark.stamp import environment_stamp


def write_result(
    result: dict, out: Path, t0: float, stamp: dict | None = None, **after: object
) -> dict:
    """Append ``wall_time_s`` (seconds since ``t0``, a ``time.perf_counter()``), ``stamp`` (the
    CPU environment stamp unless given) and then ``after``'s keys to ``result``; write it to
    ``out`` as indented JSON; return it."""
    result["wall_time_s"] = round(time.perf_counter() - t0, 1)
    result["stamp"] = environment_stamp("cpu") if stamp is None else stamp
    result.update(after)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def run_main(
    doc: str,
    default_out: Path,
    run: Callable[[argparse.Namespace], dict],
    argv: list[str] | None = None,
    arguments: Sequence[tuple[str, dict]] = (),
    report: Callable[[dict], None] | None = None,
) -> int:
    """The command line of an experiment: ``--out`` (default ``default_out``), ``--threads``
    (default 1) and ``arguments`` (``(flag, add_argument keywords)`` each); sets torch's threads,
    calls ``run(args)``, prints where it wrote the result and how long it took, then ``report``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--threads", type=int, default=1)
    for flag, kwargs in arguments:
        parser.add_argument(flag, **kwargs)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = run(args)
    print(f"wrote {args.out} in {result['wall_time_s']} s")
    if report is not None:
        report(result)
    return 0
