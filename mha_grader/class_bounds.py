"""How a class's sandboxes are bounded and kept apart, as ``grade_class`` sets them up and
``grading.json`` records them.

``resource_control``: each student's sandbox is one cgroup (``sandbox/cgroup.py``) whose memory is
lowered so that ``workers`` sandboxes and the grader itself fit in what the grader may use;
``_units_meta``: how the units of one student were kept apart (``sandbox/confine.py``).
"""

from __future__ import annotations

import dataclasses
import sys

from mha_grader.sandbox import cgroup, confine
from mha_grader.sandbox.launch import Limits

RESERVE = 320 * 2**20  # what the grader may grow by while it reads results (tests: < 300 MiB)


def _rss() -> int:
    try:
        kib = next(
            int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")
        )
    except (OSError, StopIteration, ValueError):
        return 0
    return kib * 1024


def resource_control(limits: Limits, workers: int) -> tuple[Limits, str]:
    """Each student's sandbox as one cgroup (``cgroup.py``): its memory lowered so that
    ``workers`` sandboxes and this grader fit in what the grader may use (so a sandbox that fills
    its memory is its own OOM, never one whose victim is a classmate); the status for
    ``grading.json``. Where no cgroup can be made, one line on stderr says so."""
    why = cgroup.problem()
    if why is None:
        cgroup.sweep_stale()
        memory = cgroup.fit(int(limits.student_memory_gb * 2**30), workers, _rss() + RESERVE)
        limits = dataclasses.replace(limits, student_memory_gb=memory / 2**30)
    else:
        print(
            f"mha-grader: no cgroup per student ({why}); each sandbox is bounded only by "
            "per-process limits (see the instructor guide, 'Per-student bounds')",
            file=sys.stderr,
        )
    return limits, cgroup.status(limits.bounds())


def _units_meta(mode: str) -> str:
    """How the units of one student were kept apart (see confine.py), for grading.json."""
    how = confine.unit_mode(mode)
    if how == "landlock":
        return "one sandbox per student; each unit confined by Landlock and its own namespaces"
    if how == "sandbox":
        return f"one sandbox per unit (slower; {confine.problem() or confine.ENV_VAR + '=sandbox'})"
    return "not isolated"
