"""When the browser test clicks Run All again (``_stalled``), and what it records (``_diagnose``),
without a browser: a stalled notebook is one whose remaining cells show "[ ]" with nothing queued
or running for ``STALL_S`` seconds."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from . import test_jupyterlab as lab_test

CELLS = 3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The browser test's own clock (its module's ``time``), not the process's."""
    c = Clock()
    monkeypatch.setattr(lab_test, "time", SimpleNamespace(monotonic=c, strftime=time.strftime))
    return c


def run_with(clock: Clock, prompts: list[str], status: str = "idle", **state) -> lab_test.Run:
    run = lab_test.Run("nb.ipynb", lab_test.Expected(CELLS, 0, 0, False), started=clock.now)
    run.triggered = run.moved = clock.now
    run.state = {"prompts": prompts, "status": status, "errors": [], "dialogs": [], **state}
    return run


@pytest.mark.parametrize(
    ("prompts", "state", "stalled"),
    [
        (["[1]:", "[ ]:", "[ ]:"], {}, True),  # notebook 08 in session 16's .ci/run
        (["[ ]:", "[ ]:", "[ ]:"], {}, True),  # Run All started nothing
        (["[1]:", "[ ]:", "[ ]:"], {"status": "busy"}, True),  # the same, the kernel busy
        (["[1]:", "[*]:", "[*]:"], {"status": "busy"}, False),  # a long cell: still running
        (["[1]:", "[*]:", "[*]:"], {}, False),  # queued while the page says idle: still pending
        (["[1]:", "[2]:", "[3]:"], {}, False),  # done
        (["[1]:", "[ ]:"], {}, False),  # a prompt hidden: Expand All Code's case, not a stall
        (["[1]:", "[ ]:", "[ ]:"], {"errors": ["ValueError"]}, False),  # stopped at an error: done
        (["[1]:", "[ ]:", "[ ]:"], {"dialogs": ["Kernel Restarting"], "status": "busy"}, False),
        ([], {}, False),  # the page shows no cells (yet)
    ],
)
def test_stalled_after_the_wait_only(clock, prompts, state, stalled):
    run = run_with(clock, prompts, **state)
    assert not lab_test._stalled(run)  # first sight of these prompts
    clock.now += lab_test.STALL_S - 1
    assert not lab_test._stalled(run)
    clock.now += 2
    assert lab_test._stalled(run) is stalled


def test_a_changed_prompt_restarts_the_wait(clock):
    run = run_with(clock, ["[*]:", "[*]:", "[*]:"], status="busy")
    lab_test._stalled(run)
    clock.now += lab_test.STALL_S + 1
    run.state = {**run.state, "prompts": ["[1]:", "[ ]:", "[ ]:"], "status": "idle"}
    assert not lab_test._stalled(run)  # it just changed
    clock.now += lab_test.STALL_S + 1
    assert lab_test._stalled(run)


def test_a_new_click_restarts_the_wait(clock):
    run = run_with(clock, ["[1]:", "[ ]:", "[ ]:"])
    lab_test._stalled(run)
    clock.now += lab_test.STALL_S + 1
    run.triggered = clock.now  # Run All clicked again, nothing changed yet
    assert not lab_test._stalled(run)
    clock.now += lab_test.STALL_S + 1  # and still nothing: stalled again
    assert lab_test._stalled(run)


class StubLab:
    """The two things ``_diagnose`` asks of the Lab server, each able to fail."""

    def __init__(self, sessions=None, log: str = "", fail_api=False, fail_log=False) -> None:
        self.sessions, self.log, self.fail_api, self.fail_log = sessions, log, fail_api, fail_log

    def api(self, path: str):
        if self.fail_api:
            raise ConnectionError("refused")
        return self.sessions

    def log_text(self, start: int) -> str:
        if self.fail_log:
            raise FileNotFoundError("jupyter-lab.log")
        return self.log


def test_the_diagnosis_names_kernel_page_and_log(clock):
    run = run_with(clock, ["[1]:", "[ ]:", "[ ]:"], notifications=["Kernel still initializing"])
    sessions = [
        {"path": "notebooks/nb.ipynb", "kernel": {"execution_state": "idle", "connections": 0}},
        {"path": "notebooks/other.ipynb", "kernel": {"execution_state": "busy"}},
        {"path": "notebooks/nb.ipynb", "kernel": None},
    ]
    lab = StubLab(sessions, log="[I] one\n[W] Replacing stale connection\n")
    seen = lab_test._diagnose(lab, run, ["12:00:00 warning: Connection lost"])
    for part in (
        "1/3 cells",
        "'execution_state': 'idle', 'connections': 0",
        "Kernel still initializing",
        "Connection lost",
        "Replacing stale connection",
    ):
        assert part in seen, (part, seen)
    assert "busy" not in seen.split("kernel ")[1].split(";")[0]  # only this notebook's kernel


@pytest.mark.parametrize(
    ("lab", "says"),
    [
        (StubLab(fail_api=True, log="[W] something"), "sessions API: refused"),
        (StubLab([], fail_log=True), "diagnosis failed: FileNotFoundError"),
    ],
)
def test_a_failing_diagnosis_says_so_and_never_raises(clock, lab, says):
    run = run_with(clock, ["[1]:", "[ ]:", "[ ]:"])
    assert says in lab_test._diagnose(lab, run, [])
