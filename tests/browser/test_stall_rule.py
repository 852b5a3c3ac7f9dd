"""When the browser test clicks Run All again (``_stalled``), without a browser: a stalled notebook
is one whose remaining cells show "[ ]" with nothing queued or running for ``STALL_S`` seconds."""

from __future__ import annotations

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
    c = Clock()
    monkeypatch.setattr(lab_test.time, "monotonic", c)
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
        (["[1]:", "[*]:", "[*]:"], {"status": "busy"}, False),  # a long cell: still running
        (["[1]:", "[2]:", "[3]:"], {}, False),  # done
        (["[1]:", "[ ]:"], {}, False),  # a prompt hidden: Expand All Code's case, not a stall
        (["[1]:", "[ ]:", "[ ]:"], {"errors": ["ValueError"]}, False),  # stopped at an error: done
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
