"""The cgroups themselves: where this grader can make them (v1 or v2, under its own cgroup:
``_layout``) and one student's cgroup (``Group``: made with its ``Bounds``, entered by the
sandbox's first process, watched for what the kernel did in it, killed and removed).

``cgroup.py`` says whether a cgroup per student can be made here and makes one per student.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "MHA_GRADER_CGROUPS"
V1 = ("memory", "pids", "cpu")
MOUNT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
PREFIX = "mha-student-"
SLACK_PIDS = 8  # bubblewrap's own two processes, the zygote: not the submission's
MEMORY = "memory"
PROCESSES = "processes"
_COUNT = itertools.count()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Bounds:
    """What one student's sandbox may use, all its processes together."""

    memory: int  # bytes
    pids: int  # processes and threads
    cpus: float  # cores (CFS quota per period)

    def describe(self) -> str:
        return (
            f"memory {self.memory / 2**20:.0f} MiB, {self.pids} processes, "
            f"{self.cpus:g} CPU core{'s' if self.cpus != 1 else ''}"
        )


def _own(controller: str | None) -> str | None:
    """The grader's cgroup path for ``controller`` (v1), or the unified one (``None``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if (controller is None and ctrls == "") or (controller and controller in ctrls.split(",")):
            return path
    return None


def _v1_bases() -> dict[str, Path] | str:
    bases = {}
    for c in V1:
        own = _own(c)
        if own is None or not (MOUNT / c / "cgroup.procs").is_file():
            return f"the cgroup v1 '{c}' hierarchy is not mounted at {MOUNT / c}"
        bases[c] = MOUNT / c / own.lstrip("/")
    return bases


def _v2_base() -> Path | str:
    own = _own(None)
    base = MOUNT / (own or "/").lstrip("/")
    have = (
        set((MOUNT / "cgroup.controllers").read_text().split())
        if (MOUNT / "cgroup.controllers").is_file()
        else set()
    )
    if not {"memory", "pids", "cpu"} <= have:
        return f"cgroup v2 at {MOUNT} lacks the memory, pids or cpu controller (has: {' '.join(sorted(have)) or 'none'})"
    try:  # our cgroup must hand the controllers to its children (delegation)
        (base / "cgroup.subtree_control").write_text("+memory +pids +cpu")
    except OSError as e:
        return (
            f"cannot enable the memory, pids and cpu controllers under {base} ({e.strerror}); "
            "run the grader in a delegated cgroup, e.g. `systemd-run --scope -p Delegate=yes ...`"
        )
    return base


@functools.lru_cache(maxsize=1)
def _layout() -> tuple[str, object]:
    """("v1", {controller: base}) or ("v2", base) where this grader can make cgroups, else
    ("", why)."""
    if os.environ.get(ENV_VAR, "").lower() in ("0", "off", "no", "false"):
        return "", f"{ENV_VAR}={os.environ[ENV_VAR]}"
    if not os.path.isdir("/sys/fs/cgroup"):
        return "", "no /sys/fs/cgroup (not Linux, or cgroups not mounted)"
    if (MOUNT / "memory" / "cgroup.procs").is_file():
        got = _v1_bases()
        kind = "v1"
    else:
        got = _v2_base()
        kind = "v2"
    if isinstance(got, str):
        return "", got
    try:  # can we make one here? (root, a writable hierarchy)
        g = Group.make(Bounds(64 * 2**20, 16, 1.0), kind, got)
        g.remove()
    except OSError as e:
        return (
            "",
            f"cannot create a cgroup under {e.filename or MOUNT} ({e.strerror}; uid {os.getuid()})",
        )
    return kind, got


class Group:
    """One student's cgroup (one folder per v1 hierarchy, or one v2 folder)."""

    def __init__(self, kind: str, paths: dict[str, Path], bounds: Bounds) -> None:
        self.kind, self.paths, self.bounds = kind, paths, bounds
        self._seen = {MEMORY: 0, PROCESSES: 0}

    @classmethod
    def make(cls, bounds: Bounds, kind: str | None = None, bases=None) -> Group:
        """A new cgroup with ``bounds``; ``OSError`` if it cannot be made."""
        if kind is None:
            kind, bases = _layout()
            if not kind:
                raise OSError(f"no cgroup: {bases}")
        with _LOCK:
            name = f"{PREFIX}{os.getpid()}-{next(_COUNT)}"
        made: list[Path] = []
        paths = {c: bases[c] / name for c in V1} if kind == "v1" else {"": bases / name}
        try:
            for p in paths.values():
                p.mkdir()
                made.append(p)
            quota = str(int(bounds.cpus * PERIOD_US))
            if kind == "v1":
                m = paths["memory"]
                (m / "memory.limit_in_bytes").write_text(str(bounds.memory))
                with contextlib.suppress(OSError):  # where swap is accounted: no swapping out of it
                    (m / "memory.memsw.limit_in_bytes").write_text(str(bounds.memory))
                (paths["pids"] / "pids.max").write_text(str(bounds.pids))
                (paths["cpu"] / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (paths["cpu"] / "cpu.cfs_quota_us").write_text(quota)
            else:
                g = paths[""]
                (g / "memory.max").write_text(str(bounds.memory))
                (g / "memory.oom.group").write_text("1")
                with contextlib.suppress(OSError):
                    (g / "memory.swap.max").write_text("0")
                (g / "pids.max").write_text(str(bounds.pids))
                (g / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        except OSError:
            for p in made:
                with contextlib.suppress(OSError):
                    p.rmdir()
            raise
        return cls(kind, paths, bounds)

    # ------------------------------------------------------------------ putting processes in

    @property
    def procs(self) -> list[str]:
        return [str(p / "cgroup.procs") for p in self.paths.values()]

    def enter(self) -> None:
        """Move the calling process in (a ``preexec_fn``, before it drops root)."""
        pid = str(os.getpid())
        for f in self.procs:
            with open(f, "w") as fh:
                fh.write(pid)

    def argv(self) -> list[str]:
        """A command prefix that moves itself in, then execs the rest (so the child can start by
        ``vfork``, without a ``preexec_fn``); exit 126 if it cannot."""
        script = (
            'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; '
            'n=$((n-1)); done; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "sh", str(len(self.procs)), *self.procs]

    # ------------------------------------------------------------------ what happened in it

    def _counter(self, what: str) -> int:
        try:
            if what == MEMORY:
                p = (
                    self.paths["memory"] / "memory.oom_control"
                    if self.kind == "v1"
                    else self.paths[""] / "memory.events"
                )
                key = "oom_kill"
            else:
                p = (self.paths["pids"] if self.kind == "v1" else self.paths[""]) / "pids.events"
                key = "max"
            for line in p.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
        except (OSError, ValueError):
            pass
        return 0

    def mark(self) -> None:
        """Start of a run: later ``cause`` reports only what happens from now on."""
        self._seen = {w: self._counter(w) for w in (MEMORY, PROCESSES)}

    def cause(self) -> str | None:
        """``MEMORY`` when the kernel's OOM killer acted in this cgroup since ``mark``,
        ``PROCESSES`` when a fork failed at ``pids.max``, else ``None``."""
        for what in (MEMORY, PROCESSES):
            if self._counter(what) > self._seen[what]:
                return what
        return None

    def throttled(self) -> float:
        """Seconds this cgroup's processes were held back by its CPU quota, in all."""
        p = (self.paths["cpu"] if self.kind == "v1" else self.paths[""]) / "cpu.stat"
        with contextlib.suppress(OSError, ValueError):
            rows = dict(
                line.split()[:2] for line in p.read_text().splitlines() if len(line.split()) >= 2
            )
            if "throttled_usec" in rows:
                return int(rows["throttled_usec"]) / 1e6
            return int(rows.get("throttled_time", 0)) / 1e9
        return 0.0

    def busy(self) -> int:
        """How many of its processes are running or waiting for a CPU now (state ``R``): more
        than one means they compete for its quota (on a loaded machine the quota itself may
        never be reached, so ``throttled`` alone cannot tell)."""
        n = 0
        for pid in self.pids():
            with contextlib.suppress(OSError, IndexError):
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "R":
                    n += 1
        return n

    # ------------------------------------------------------------------ taking it down

    def pids(self) -> list[int]:
        out: set[int] = set()
        for f in self.procs:
            with contextlib.suppress(OSError, ValueError):
                out |= {int(x) for x in Path(f).read_text().split()}
        return sorted(out)

    def kill_all(self, timeout: float = 10.0) -> bool:
        """SIGKILL every process in it until none is left (v2: ``cgroup.kill``); True if empty."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            left = self.pids()
            if not left:
                return True
            if self.kind == "v2" and (self.paths[""] / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (self.paths[""] / "cgroup.kill").write_text("1")
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        return not self.pids()

    def remove(self) -> None:
        """Kill what is left, then remove the cgroup (each hierarchy's folder)."""
        self.kill_all()
        for p in self.paths.values():
            for _ in range(100):
                try:
                    p.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # a process still exiting
                    time.sleep(0.02)
