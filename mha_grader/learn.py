"""Step 5 of grading a submission: what the stage where a child stopped teaches.

``_why`` turns how the child ended (killed by the parent, by the kernel in the student's own
cgroup, a signal, an exit code) into a status and the parent's own words; ``_after`` gives that
status to the cell (skipped, grading goes on without it) or the item where the child stopped,
and says whether a fresh child should run what is left.
"""

from __future__ import annotations

import signal

from mha_grader import compare as C
from mha_grader.items import Item
from mha_grader.plan import Plan
from mha_grader.sandbox import cgroup, protocol
from mha_grader.sandbox.child import CONFINE_FAILED
from mha_grader.sandbox.launch import (
    CPU_BOUND,
    DISK_FULL,
    OUT_OF_MEMORY,
    TAMPERED,
    TOO_MANY_PROCESSES,
    Limits,
)


def _why(killed: str | None, code: int | None, limits: Limits) -> tuple[str, str]:
    if killed == DISK_FULL:
        return C.DISK, (
            f"filled its writable space (temp: {limits.disk_mb} MiB, {limits.disk_files} "
            f"files; results: {limits.result_mb} MiB)"
        )
    if killed == TAMPERED:
        return (
            C.INVALID_RESULT,
            "the submission wrote the grader's progress file (stages out of order)",
        )
    if killed in (OUT_OF_MEMORY, TOO_MANY_PROCESSES):  # the kernel, in this student's own cgroup
        return C.CRASHED, cgroup.message(
            cgroup.MEMORY if killed == OUT_OF_MEMORY else cgroup.PROCESSES, limits.bounds()
        )
    if killed == CPU_BOUND:
        return C.TIMEOUT, cgroup.message(cgroup.CPU, limits.bounds())
    if code is not None and code > 128:  # bubblewrap reports a signal as 128 + its number
        code = -(code - 128)
    if killed or code == -signal.SIGXCPU:
        return C.TIMEOUT, ("took too long" if killed else "used too much CPU time")
    if code == -signal.SIGKILL:
        return C.CRASHED, (
            "the process was killed (SIGKILL)"
            if cgroup.problem() is None
            else "the process was killed (SIGKILL: out of memory?)"
        )
    if code == -signal.SIGXFSZ:
        return C.CRASHED, "wrote a file larger than the limit"
    if code == CONFINE_FAILED:
        return C.CRASHED, "the sandbox could not confine this notebook's code (Landlock)"
    if code is not None and code < 0:
        return C.CRASHED, f"the process died of signal {-code}"
    return C.CRASHED, f"the process exited here (exit code {code}: os._exit, or a crash)"


def _after(
    plan: Plan,
    todo: dict[str, list[Item]],
    stage: str,
    killed: str | None,
    code: int | None,
    limits: Limits,
) -> bool:
    """Step 5: what the child's last stage teaches; False when nothing more can be learned."""
    if killed == DISK_FULL:
        for u in todo:
            plan.note(
                plan.units[u][0],
                f"{_why(killed, code, limits)[1]}: the write that did not fit failed",
            )
    if stage == protocol.DONE:  # all of todo ran; one sandbox per unit: on to the next unit
        status, why = (C.CRASHED, "no result") if killed is None else _why(killed, code, limits)
        plan.settle_all(todo, status, why)
        return True
    status, why = _why(killed, code, limits)
    cell, item = protocol.parse_cell_stage(stage), protocol.parse_item_stage(stage)
    if killed == TAMPERED:  # learner code writes the progress: no stage can be trusted
        plan.settle_all(todo, status, why)
        return False
    if cell is not None and cell[0] in todo and (plan.units[cell[0]][0], cell[1]) not in plan.skip:
        name = plan.units[cell[0]][0]
        plan.skip.add((name, cell[1]))
        plan.note(name, f"cell {cell[1]}: {status} ({why}); skipped, grading went on without it")
        return True
    hit = next((it for its in todo.values() for it in its if it.id == item), None)
    if hit is not None:
        plan.settle(hit, {"status": status, "parent_message": why})
        return True
    plan.settle_all(todo, status, f"{why} before grading")  # died before or outside any stage
    return False
