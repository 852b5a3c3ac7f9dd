"""When the browser test clicks Run All again (``_stalled``), what it records (``_diagnose``), and
its wait for the notebook's kernel before the first click (``_wait_for_kernel``), without a
browser: a stalled notebook is one whose remaining cells show "[ ]" with nothing queued or running
for ``STALL_S`` seconds."""

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


class StubPage:
    """What ``_wait_for_kernel`` asks of the page: a "Select Kernel" dialog that may be open (until
    its accept button is clicked), and the wait between polls, which moves the clock."""

    def __init__(self, clock: Clock, dialog: str = "") -> None:
        self.clock, self.dialog, self.accepted = clock, dialog, 0

    def locator(self, selector: str) -> SimpleNamespace:
        page = self

        def click() -> None:
            assert selector == ".jp-Dialog .jp-mod-accept", selector
            page.accepted += 1
            page.dialog = ""

        one = SimpleNamespace(inner_text=lambda: page.dialog, click=click)
        return SimpleNamespace(count=lambda: int(bool(page.dialog)), first=one)

    def wait_for_timeout(self, ms: float) -> None:
        self.clock.now += ms / 1000


class SessionsLab(StubLab):
    """The sessions API answering one listing per poll (the last one from then on)."""

    def __init__(self, *listings: list[dict]) -> None:
        super().__init__()
        self.listings, self.polls = list(listings), 0

    def api(self, path: str):
        assert path == "/api/sessions", path
        self.polls += 1
        return self.listings[min(self.polls, len(self.listings)) - 1]


def session(path: str, state: str | None = "idle", connections: int = 1) -> dict:
    return {
        "path": path,
        "kernel": state and {"execution_state": state, "connections": connections},
    }


@pytest.mark.parametrize(
    ("listings", "polls"),
    [
        ([[session("notebooks/nb.ipynb")]], 1),  # ready at once
        ([[], [session("notebooks/nb.ipynb", None)], [session("notebooks/nb.ipynb")]], 3),
        ([[session("notebooks/nb.ipynb", "starting", 0)], [session("notebooks/nb.ipynb")]], 2),
        ([[session("notebooks/nb.ipynb", connections=0)], [session("notebooks/nb.ipynb")]], 2),
        ([[session("notebooks/nb.ipynb", "busy")], [session("notebooks/nb.ipynb")]], 2),
        # another notebook's kernel, even one whose name ends with this one's, is not this one's
        (
            [
                [session("notebooks/other.ipynb"), session("notebooks/xnb.ipynb")],
                [session("nb.ipynb")],
            ],
            2,
        ),
    ],
)
def test_the_wait_ends_when_this_notebooks_kernel_is_idle_and_connected(clock, listings, polls):
    run = run_with(clock, [])
    lab = SessionsLab(*listings)
    lab_test._wait_for_kernel(StubPage(clock), lab, run)
    assert lab.polls == polls
    assert run.stalls == []


def test_a_select_kernel_dialog_is_accepted_and_recorded(clock):
    run = run_with(clock, [])
    page = StubPage(clock, dialog="Select Kernel\nPython (mha-course)")
    lab = SessionsLab([session("notebooks/nb.ipynb", None)], [session("notebooks/nb.ipynb")])
    lab_test._wait_for_kernel(page, lab, run)
    assert page.accepted == 1
    assert run.stalls == [
        "a Select Kernel dialog opened with the notebook; its default was accepted"
    ]


def test_another_dialog_is_left_to_the_test_that_reports_dialogs(clock):
    run = run_with(clock, [])
    page = StubPage(clock, dialog="Kernel Restarting")
    lab_test._wait_for_kernel(page, SessionsLab([session("notebooks/nb.ipynb")]), run)
    assert page.accepted == 0 and run.stalls == []


def test_no_kernel_within_the_limit_names_the_notebook_and_what_the_server_listed(clock):
    run = run_with(clock, [])
    lab = SessionsLab([session("notebooks/nb.ipynb", "busy")])
    with pytest.raises(
        TimeoutError, match=r"no idle kernel connected to nb\.ipynb within 5 s: .*busy"
    ):
        lab_test._wait_for_kernel(StubPage(clock), lab, run, timeout=5.0)
    assert 5.0 <= clock.now - run.started <= 5.5  # polled until the limit, not beyond
