"""The evidence channel's parent side (mha_grader/sandbox/channel.py) against forged frames, no sandbox.

Every frame that breaks the protocol marks the item "invalid result" and ends the conversation;
well-formed requests the real object would refuse come back as an error reply, nothing more.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from mha_course.grading.chapters import ch05, ch08
from mha_grader.sandbox import channel
from mha_grader.sandbox.threads import one_torch_thread


class Echo(channel.Service):
    def handle(self, op, args):
        if op == "ping":
            channel.want_keys(args, "n")
            return {"n": channel.want_int(args, "n", 0, 9)}
        if op == "refuse":
            raise channel.Refused("no", "RuntimeError")
        raise channel.Violation("unknown op")


def _server():
    server = channel.Server({"it": lambda case: Echo()}, {"it": 2})
    return server, server.start()


def _send(sock, payload: bytes):
    sock.sendall(payload)
    head = sock.recv(4)
    if len(head) < 4:
        return None  # the parent hung up
    (n,) = struct.unpack(">I", head)
    data = b""
    while len(data) < n:
        data += sock.recv(n - len(data))
    return json.loads(data)


def _frame(doc) -> bytes:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return struct.pack(">I", len(data)) + data


def _violated(*payloads: bytes) -> dict:
    server, sock = _server()
    try:
        for p in payloads[:-1]:
            assert "ok" in _send(sock, p)
        assert _send(sock, payloads[-1]) is None, "the parent kept talking after a violation"
    finally:
        sock.close()
        server.stop()
    return server.finish("it", {"status": "ok", "outputs": [[np.zeros(1)], [np.zeros(1)]]})


BEGIN = _frame({"op": "begin", "item": "it", "case": 0})


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">I", 2**31 - 1) + b"{",  # a 2 GiB frame
        struct.pack(">I", 0),
        _frame(b"\xff\xfe"),  # not UTF-8
        _frame(b"[1, 2]"),  # not an object
        _frame(b'{"op": "ping", "n": NaN}'),  # not JSON
        _frame(b"[" * 30_000 + b"]" * 30_000),  # nesting bomb (under the size cap)
        _frame({"op": "ping", "n": 1}),  # outside a session
        _frame({"op": "begin", "item": "other", "case": 0}),  # not an item of this run
        _frame({"op": "begin", "item": "it", "case": 2}),  # case out of range
        _frame({"op": "begin", "item": "it", "case": True}),  # a bool is not a case index
        _frame({"op": "begin", "item": "it", "case": 0, "x": 1}),  # extra argument
    ],
)
def test_a_forged_frame_breaks_the_item(payload):
    res = _violated(payload)
    assert res["status"] == "invalid result" and "misused" in res["parent_message"]


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "ping", "n": 10},
        {"op": "ping", "n": 1.0},
        {"op": "weights"},
        {"op": "begin", "item": "it", "case": 1},
    ],
)
def test_a_forged_request_inside_a_session_breaks_the_item(request_):
    res = _violated(BEGIN, _frame(request_))
    assert res["status"] == "invalid result"


def test_a_session_opened_twice_breaks_the_item():
    res = _violated(BEGIN, _frame({"op": "end"}), BEGIN)
    assert res["status"] == "invalid result"


def test_well_formed_requests_and_refusals():
    server, sock = _server()
    try:
        assert _send(sock, BEGIN) == {"ok": {}}
        assert _send(sock, _frame({"op": "ping", "n": 3})) == {"ok": {"n": 3}}
        assert _send(sock, _frame({"op": "refuse"})) == {"error": "RuntimeError", "message": "no"}
        assert _send(sock, _frame({"op": "end"})) == {"ok": {}}
    finally:
        sock.close()
        server.stop()
    # case 1 was never served: its outputs cannot be the learner's
    res = server.finish("it", {"status": "ok", "outputs": [[np.zeros(1)], [np.zeros(1)]]})
    assert res["status"] == "invalid result" and "never served" in res["parent_message"]


def _served_model_session(case):
    """A ModelService for a real ex05 case, driven through the child's RemoteModel."""
    return channel.in_process({"g": lambda i: ch05.serve_model(case)}, {"g": 1})


def test_the_model_counts_tokens_and_matches_the_real_model():
    case = ch05._generate_cases(np.random.default_rng(0))[0]
    with _served_model_session(case) as server:
        channel.client().call("begin", item="g", case=0)
        model = ch05.RemoteModel(channel.client())
        prompt = torch.from_numpy(case["prompt"])
        ids = ch05.drive_generate(
            lambda m, p, n: torch.cat([p, m(p)[:, -1:].argmax(-1)], 1),
            None,
            case["num_layers"],
            prompt,
            case["n_new"],
        )
        with one_torch_thread():  # as the channel serves it: the same reduction order
            want = ch05._build(case["seed"], case["num_layers"])(prompt)
        torch.testing.assert_close(
            model(prompt), want, rtol=0, atol=0
        )  # the parent's model, exactly
        with pytest.raises(IndexError):
            model(torch.tensor([[99]]))  # checked by the proxy, as nn.Embedding would
        channel.client().call("end")
    got = server.finish("g", {"status": "ok", "outputs": [[ids.numpy()]]})["outputs"][0]
    assert bool(got[1])  # 3 + 3 tokens fed per row, within P + n_new = 7
    assert server.sessions[("g", 0)].fed == 2 * 6


def test_the_device_judges_samples_from_its_own_log():
    case = ch08._timer_cases(np.random.default_rng(0))[0]
    r, w = case["repeats"], case["warmup"]
    service = ch08.serve_device(case)
    dev = service.device
    for _ in range(w):
        service.handle("launch", {})
    samples = []
    for _ in range(r):
        s, e = (service.handle("new_event", {})["event"] for _ in range(2))
        service.handle("record", {"event": s})
        service.handle("launch", {})
        service.handle("record", {"event": e})
        with pytest.raises(channel.Refused):  # before a synchronize, as CUDA
            service.handle("elapsed", {"start": s, "end": e})
        samples.append((s, e))
    service.handle("synchronize", {})
    ms = [service.handle("elapsed", {"start": s, "end": e})["ms"] for s, e in samples]
    np.testing.assert_allclose(ms, dev.durations_ms[w:], rtol=1e-12)
    assert dev.durations_ms[0] > 400 and np.std(ms) > 0  # a slow first launch; spread in the rest
    verdict = service.judged([np.array(ms)])[0]
    assert verdict.tolist() == ch08._timer_reference(*case.values()).tolist()
    assert service.failure_note() and "not synchronized" in service.failure_note()
