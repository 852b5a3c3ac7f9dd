"""Helpers for the grading tests: build submissions from the solution notebooks, grade many at once."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mha_course.grading import Limits, grade_submission, items_for, resolve
from mha_grader.submissions import make_submission

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
# two grading threads on two cores; one under pytest-xdist, whose workers already fill the cores
WORKERS = int(
    os.environ.get("MHA_GRADE_WORKERS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2")
)
# Tight but not flaky on a loaded 2-core machine (child start-up has its own 30 s allowance).
TEST_LIMITS = Limits(item_timeout=15.0, notebook_timeout=150.0, memory_gb=4.0)


# ex02's task 4 with its own mistake (the mask applied after the softmax), over the learner's task 1
MASK_AFTER_SOFTMAX = """
def attention(query, key, value, attn_mask=None):
    w = torch.softmax(scaled_scores(query, key), dim=-1)
    if attn_mask is not None:
        w = w * attn_mask if attn_mask.dtype == torch.bool else w * torch.exp(attn_mask)
    return w @ value, w
"""


def course_cli(*args, timeout: float = 900) -> subprocess.CompletedProcess:
    """``mha-course ARGS`` from the repository root (output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "mha_course.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def toy_item(id: str, function: str, **kw):
    """A one-case item of notebook ``nb`` for the engine's pure functions (causes, substitute)."""
    from mha_grader.items import Item

    return Item(
        id=id,
        notebook="nb",
        function=function,
        points=1,
        task="t",
        make_cases=lambda rng: [],
        reference=lambda x: x,
        **kw,
    )


def require_user_mode() -> None:
    """Skip, with the grader's own message, where mode ``user`` cannot run: not root, or the
    dedicated uid cannot read the runtime (a checkout and ``.venv`` in a 0700 folder such as
    ``/root``), where the grader itself refuses that mode."""
    from mha_grader.sandbox import isolation

    problem = isolation.user_runtime_problem()
    if problem:
        pytest.skip(f"mode user cannot run here: {problem}")


def target_notebooks(default: Path) -> list[Path]:
    """``MHA_GRADE_TARGET`` (a notebook or a folder) if set, else ``default``'s exNN notebooks."""
    target = Path(os.environ.get("MHA_GRADE_TARGET", default))
    return [target] if target.is_file() else sorted(target.glob("ex*.ipynb"))


def solution(name: str) -> Path:
    return SOLUTIONS / f"{resolve(name)}.ipynb"


def build(
    name: str,
    dest: Path,
    replace: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    extra: list[tuple[int, str]] = (),
) -> Path:
    """A submission made from exercise ``name``'s solution (see ``make_submission``)."""
    return make_submission(solution(name), dest, replace, drop, extra)


def grade_many(jobs: dict[str, tuple[Path, str]], seed: int = 7, limits: Limits = TEST_LIMITS):
    """``{key: (notebook, exNN)}`` -> ``{key: ({item id: ItemResult}, notes)}``.

    Jobs for different exercises are packed into one submission (one child, one torch import,
    separate namespaces); two jobs for the same exercise never share a child. Batches run in
    parallel.
    """
    batches: list[dict[str, tuple[str, Path]]] = []  # stem -> (key, path)
    for key, (path, name) in jobs.items():
        stem = resolve(name)
        home = next((b for b in batches if stem not in b), None)
        if home is None:
            home = {}
            batches.append(home)
        home[stem] = (key, path)

    def one(batch):
        graded = grade_submission(
            {stem: path for stem, (_, path) in batch.items()},
            {stem: items_for(stem) for stem in batch},
            seed,
            limits,
        )
        return {
            batch[stem][0]: ({r.id: r for r in res}, notes) for stem, (res, notes) in graded.items()
        }

    out = {}
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for part in pool.map(one, batches):
            out.update(part)
    return out
