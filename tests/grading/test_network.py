"""Issue 19, class 8: learner code reaches no network service, in every isolation mode.

The test serves four echo services on the host: UDP and TCP on 127.0.0.1, a unix socket at a
path anyone may connect to, and an abstract unix socket. ex02's forbidden item is right only if
the submission got an answer from one of them; every service must also have heard nothing.
Modes: ``bwrap`` and (as root) ``user``, units confined by Landlock or one sandbox per unit.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from grading_helpers import build, grade_many, require_user_mode

from mha_grader.sandbox import isolation

CAUSAL = "ex02_causal_mask"
GOOD = "torch.tril(torch.ones(L, S, dtype=torch.bool))"
MODES = [("bwrap", "landlock"), ("bwrap", "sandbox")] + (
    [("user", "landlock"), ("user", "sandbox")] if os.geteuid() == 0 else []
)
REACH = """import socket
token = {TOKEN!r}.encode()
def ask(family, kind, where):
    try:
        s = socket.socket(family, kind)
        s.settimeout(2)
        if kind == socket.SOCK_DGRAM:
            s.sendto(b"ping", where)
            return s.recvfrom(64)[0] == token
        s.connect(where)
        s.sendall(b"ping")
        return s.recv(64) == token
    except OSError:
        return False
targets = [(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", {UDP})),
           (socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", {TCP})),
           (socket.AF_UNIX, socket.SOCK_STREAM, {UNIX!r}),
           (socket.AF_UNIX, socket.SOCK_STREAM, {ABSTRACT!r})]
if any(ask(*t) for t in targets):
    return {GOOD}
raise RuntimeError("no service answered")"""


class Services:
    """Four echo services that answer ``token`` and count what they heard."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex[:16]
        self.heard: list[str] = []
        self.dir = Path(tempfile.mkdtemp(prefix="mha-net-"))
        os.chmod(self.dir, 0o755)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.unix_path = str(self.dir / "echo.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)  # anyone may connect: the worst case for mode "user"
        self.abstract_name = "\0mha-net-" + self.token
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind(self.abstract_name)
        for s in (self.tcp, self.unix, self.abstract):
            s.listen(8)
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()
        threading.Thread(target=self._datagrams, daemon=True).start()

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            self.heard.append(str(srv.family))
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(64)
                    conn.sendall(self.token.encode())
                except OSError:
                    pass

    def _datagrams(self) -> None:
        while True:
            try:
                _, peer = self.udp.recvfrom(64)
            except OSError:
                return
            self.heard.append("udp")
            self.udp.sendto(self.token.encode(), peer)

    def fill(self, text: str) -> str:
        return (
            text.replace("{TOKEN!r}", repr(self.token))
            .replace("{UDP}", str(self.udp.getsockname()[1]))
            .replace("{TCP}", str(self.tcp.getsockname()[1]))
            .replace("{UNIX!r}", repr(self.unix_path))
            .replace("{ABSTRACT!r}", repr(self.abstract_name))
            .replace("{GOOD}", GOOD)
        )

    def close(self) -> None:
        for s in (self.udp, self.tcp, self.unix, self.abstract):
            s.close()
        os.unlink(self.unix_path)
        os.rmdir(self.dir)


def test_the_services_answer_outside_the_sandbox():
    """The attack works where nothing confines it (this process): so the test can fail."""
    svc = Services()
    try:
        ns: dict = {}
        body = "\n".join("    " + ln for ln in svc.fill(REACH).split("\n"))
        exec(f"import torch\ndef f(L, S):\n{body}\n", ns)
        assert ns["f"](2, 2).dtype.is_floating_point is False
        assert len(svc.heard) >= 1
    finally:
        svc.close()


@pytest.mark.parametrize(("mode", "units"), MODES, ids=[f"{m}-{u}" for m, u in MODES])
def test_no_socket_reaches_the_host(tmp_path, monkeypatch, mode, units):
    if not sys.platform.startswith("linux") or isolation.bwrap_problem():
        pytest.skip(f"the OS sandbox is needed: {isolation.bwrap_problem()}")
    if mode == "user":
        require_user_mode()
    monkeypatch.setenv(isolation.ENV_VAR, mode)
    monkeypatch.setenv("MHA_GRADER_UNITS", units)
    svc = Services()
    try:
        body = "\n".join("    " + ln for ln in svc.fill(REACH).split("\n"))
        nb = build(
            "ex02",
            tmp_path / "sub.ipynb",
            replace={CAUSAL: f"def make_causal_mask(L, S):\n{body}\n"},
        )
        res, notes = grade_many({"net": (nb, "ex02")})["net"]
    finally:
        svc.close()
    assert (res[CAUSAL].points, res[CAUSAL].status) == (0.0, "error"), (res[CAUSAL], notes)
    assert svc.heard == [], f"the host's services heard the submission: {svc.heard}"
    assert all(r.passed for i, r in res.items() if i != CAUSAL), (res, notes)
