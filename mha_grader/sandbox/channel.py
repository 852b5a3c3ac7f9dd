"""The grader's evidence channel: the PARENT serves objects whose use is graded, over a socket.

Some items are graded on HOW the learner's code uses an object, not only on what it returns:
ex05's model counts the tokens it is fed (a cached loop feeds each token once), ex08's device
knows its own kernel times (only events recorded around each launch can measure them). Such an
object must not live in the student's process, where code can clear a counter or read an
attribute. So the parent keeps the real object (a :class:`Service`) and the child gets a proxy
that forwards every call over one inherited socket (a ``socketpair``: ``pass_fds`` through
bubblewrap or the dedicated user; a thread of the same process for the in-kernel self-check,
which is not isolated).

Wire format (both ways): a 4-byte big-endian length N, then N bytes of UTF-8 JSON, one object.

- child -> parent, at most ``MAX_REQUEST`` bytes: ``{"op": <op>, ...arguments}``. The harness
  opens one session per case (``{"op": "begin", "item": <id>, "case": <int>}``, then
  ``{"op": "end"}``); every other op goes to that session's :class:`Service`, which accepts only
  its fixed ops with their exact argument names, types and ranges (ints in range, bounded lists).
- parent -> child, at most ``MAX_REPLY`` bytes: ``{"ok": {...}}`` or, when the real object would
  raise on a well-formed call, ``{"error": "ValueError" | "RuntimeError", "message": <the
  parent's own words>}``.

The course's proxies check their arguments before sending, so a request that breaks the schema
was forged: the session's item gets ``"invalid result"`` and the parent stops listening (every
later request of that child fails). No pickle; nothing the child sends is executed or echoed.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections.abc import Callable

from mha_grader.sandbox.threads import one_torch_thread

MAX_REQUEST = 64 * 1024
MAX_REPLY = 4 * 2**20
MAX_REQUESTS = 20_000  # per session: a loop that hammers the parent is cut off
_LEN = struct.Struct(">I")
REPLY_ERRORS = ("ValueError", "RuntimeError")


class Violation(Exception):
    """The child broke the channel's protocol (its item gets "invalid result")."""


class Refused(Exception):
    """A well-formed request the real object would refuse: sent back as an error reply."""

    def __init__(self, message: str, kind: str = "ValueError") -> None:
        super().__init__(message)
        self.kind = kind


class Service:
    """The parent-side object for one case of one item (subclass it in the course's chapters).

    ``handle`` answers one request (``Violation`` for anything outside the schema, ``Refused``
    for what the real object would raise); ``judged`` turns the learner's returned arrays into
    the arrays the parent judges, from the service's own evidence; ``failure_note`` names a
    mistake when the learner's call raised (e.g. an event read before a synchronize).
    """

    def handle(self, op: str, args: dict) -> dict:  # pragma: no cover - abstract
        raise Violation(f"unknown op {op!r}")

    def judged(self, outputs: list) -> list:
        return outputs

    def failure_note(self) -> str | None:
        return None


# ---------------------------------------------------------------- schema helpers for services


def want_int(args: dict, name: str, lo: int, hi: int) -> int:
    """``args[name]``, an int in ``[lo, hi]`` (not a bool, not a float); else ``Violation``."""
    v = args.get(name)
    if type(v) is not int or not lo <= v <= hi:
        raise Violation(f"{name}: expected an int in [{lo}, {hi}]")
    return v


def want_keys(args: dict, *names: str) -> None:
    if set(args) != set(names):
        raise Violation(f"expected exactly the arguments {sorted(names)}, got {sorted(args)[:8]}")


# ---------------------------------------------------------------- framing


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 16))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def send_frame(sock: socket.socket, doc: dict, cap: int) -> None:
    data = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(data) > cap:
        raise ValueError(f"a channel message of {len(data)} bytes (limit {cap})")
    sock.sendall(_LEN.pack(len(data)) + data)


def recv_frame(sock: socket.socket, cap: int) -> dict:
    """One frame; ``Violation`` if its length is over ``cap`` or it is not one JSON object."""
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if not 0 < n <= cap:
        raise Violation(f"a frame of {n} bytes (limit {cap})")
    raw = _recv_exact(sock, n)
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Violation("a frame that is not JSON") from None
    if not isinstance(doc, dict):
        raise Violation("a frame that is not a JSON object")
    return doc


def _no_constant(name: str):
    raise ValueError(name)  # NaN / Infinity are not JSON


# ---------------------------------------------------------------- parent side


class Server:
    """Serves one child's sessions from a thread of the parent.

    ``factories``: item id -> ``(case index -> Service)`` for the items this child may open.
    After the child is gone, :meth:`stop`, then :meth:`finish` per item.
    """

    def __init__(
        self, factories: dict[str, Callable[[int], Service]], n_cases: dict[str, int]
    ) -> None:
        self._factories, self._n_cases = factories, n_cases
        self.sessions: dict[tuple[str, int], Service] = {}
        self.violations: dict[str, str] = {}
        self._current: tuple[str, int] | None = None
        self._count = 0
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> socket.socket:
        """The child's end of a new socketpair (inheritable; the caller closes it after the spawn)."""
        mine, theirs = socket.socketpair()
        theirs.set_inheritable(True)
        self._sock = mine
        self._thread = threading.Thread(target=self._serve, name="mha-grader-channel", daemon=True)
        self._thread.start()
        return theirs

    def stop(self, timeout: float = 10.0) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout)
        if self._sock is not None:
            self._sock.close()

    def _blame(self, why: str, item: str | None = None) -> None:
        if item is None and self._current is not None:
            item = self._current[0]
        for it in [item] if item in self._factories else list(self._factories):
            self.violations.setdefault(it, why[:200])

    def _serve(self) -> None:
        with (
            one_torch_thread()
        ):  # served models are the parent's torch work: one thread, as judging
            self._serve_requests()

    def _serve_requests(self) -> None:
        sock = self._sock
        try:
            while True:
                try:
                    req = recv_frame(sock, MAX_REQUEST)
                except (EOFError, OSError):
                    return
                try:
                    reply = self._answer(req)
                except Refused as e:
                    reply = {
                        "error": e.kind if e.kind in REPLY_ERRORS else "ValueError",
                        "message": str(e)[:300],
                    }
                send_frame(sock, reply, MAX_REPLY)
        except Violation as e:
            self._blame(str(e))
        except Exception as e:  # noqa: BLE001 - a bug or a hostile request: never crash the parent
            self._blame(f"the grader could not serve a request ({type(e).__name__})")
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # the conversation is over: the child sees EOF

    def _answer(self, req: dict) -> dict:
        op = req.pop("op", None)
        if not isinstance(op, str):
            raise Violation("a request without an op")
        self._count += 1
        if self._count > MAX_REQUESTS * max(1, sum(self._n_cases.values())):
            raise Violation("too many requests")
        if op == "begin":
            want_keys(req, "item", "case")
            item = req["item"]
            if item not in self._factories:
                raise Violation("begin: not an item of this run")
            case = want_int(req, "case", 0, self._n_cases[item] - 1)
            if self._current is not None or (item, case) in self.sessions:
                self._blame("begin: a session opened twice, or inside another", item)
                raise Violation("begin twice")
            self.sessions[(item, case)] = self._factories[item](case)
            self._current = (item, case)
            return {"ok": {}}
        if op == "end":
            want_keys(req)
            if self._current is None:
                raise Violation("end: no session is open")
            self._current = None
            return {"ok": {}}
        if self._current is None:
            raise Violation(f"{op[:40]!r} outside a session")
        return {"ok": self.sessions[self._current].handle(op, req)}

    def finish(self, item_id: str, result: dict) -> dict:
        """The child's ``result`` for ``item_id`` with the outputs the parent judges.

        ``invalid result`` if the child broke the channel for this item, or reported outputs
        for cases it never opened; a failure keeps its status and gains the service's note.
        """
        if item_id in self.violations:
            return {
                "status": "invalid result",
                "parent_message": f"the grader's channel was misused: {self.violations[item_id]}",
            }
        n = self._n_cases.get(item_id, 0)
        if result.get("status") == "ok":
            outs = result.get("outputs") or []
            if len(outs) != n or any((item_id, i) not in self.sessions for i in range(n)):
                return {
                    "status": "invalid result",
                    "parent_message": "outputs for cases the grader's channel never served",
                }
            try:
                judged = [self.sessions[(item_id, i)].judged(list(o)) for i, o in enumerate(outs)]
            except Exception as e:  # noqa: BLE001
                return {
                    "status": "invalid result",
                    "parent_message": f"outputs the grader cannot judge ({type(e).__name__})",
                }
            return {**result, "outputs": judged}
        opened = [i for i in range(n) if (item_id, i) in self.sessions]
        if opened:
            note = self.sessions[(item_id, opened[-1])].failure_note()
            if note:
                return {**result, "parent_message": note}
        return result


# ---------------------------------------------------------------- child side


class Client:
    """The child's end: one request, one reply, in order."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def call(self, op: str, **args) -> dict:
        with self._lock:
            try:
                send_frame(self._sock, {"op": op, **args}, MAX_REQUEST)
                reply = recv_frame(self._sock, MAX_REPLY)
            except (EOFError, OSError, Violation):
                raise ConnectionError(
                    "the grader's channel is closed (an earlier request broke "
                    "its protocol, or grading ended)"
                ) from None
        if "error" in reply:
            kind = RuntimeError if reply.get("error") == "RuntimeError" else ValueError
            raise kind(str(reply.get("message", ""))[:300])
        return reply.get("ok", {})


_CLIENT: Client | None = None


def connect(fd: int | None) -> None:
    """Child: use the inherited socket ``fd`` (``None``: no channel in this unit)."""
    global _CLIENT
    _CLIENT = None if fd is None else Client(socket.socket(fileno=int(fd)))


def client() -> Client:
    """The channel to the parent; ``RuntimeError`` if this process has none."""
    if _CLIENT is None:
        raise RuntimeError("no grader channel here: this object exists only while grading")
    return _CLIENT


@contextlib.contextmanager
def in_process(factories: dict[str, Callable[[int], Service]], n_cases: dict[str, int]):
    """Self-check in a learner's kernel: the server runs in a thread of THIS process (not isolated:
    the learner's code could reach it), with the same protocol and checks as grading."""
    global _CLIENT
    server, saved = Server(factories, n_cases), _CLIENT
    theirs = server.start()
    _CLIENT = Client(theirs)
    try:
        yield server
    finally:
        _CLIENT = saved
        with contextlib.suppress(OSError):
            theirs.close()
        server.stop()
