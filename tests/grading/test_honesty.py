"""Honesty checks the student's code cannot reach (attack classes 7 and 8).

ex05 ``greedy_generate`` and ex08 ``time_call``: the evidence lives in the PARENT, which serves
the model (weights, caches, a token counter) and the simulated device (its clock, its kernel
times, its log of launches, events and reads) over a socket (mha_grader/sandbox/channel.py); the child
gets proxies, and the values only the parent needs (the model's seed, the kernel times) are
hidden from it. Checked by removing each defence (the parent's token count, ``Item.hidden``,
the frame cap, the op list, the id check with the catch-all, one session per case): every test
below then fails, except ``kernel_times_from_the_process``, whose defence is the structure itself
(the old device in the child gave ``fn.__self__.kernel_s`` away: a strict xfail until now).

ex09 ``blockwise_attention``: "never build the (L, S) matrix" is a memory bound the KERNEL
enforces: the item runs in a child of its own whose hard RLIMIT_AS is lowered (address space
after start-up + ``memory_mb``) before any submission code runs, and its large case's full
(L, S) scores matrix (256 MiB) does not fit. One line of dense softmax attention — full marks
before — now gets "memory limit"; the blockwise solution keeps full marks (test_solutions)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from grading_helpers import TEST_LIMITS, build, grade_many

from mha_course.grading import grade_submission, items_for, resolve

DENSE = """
def blockwise_attention(query, key, value, block_q, block_k, is_causal):
    return torch.nn.functional.softmax(
        (query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])).masked_fill(
            torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).triu(1) if is_causal
            else torch.zeros(query.shape[-2], key.shape[-2], dtype=torch.bool), float("-inf")), -1) @ value
"""
LIFT = """
import resource
def blockwise_attention(query, key, value, block_q, block_k, is_causal):
    for lim in (resource.RLIMIT_AS, resource.RLIMIT_DATA):  # try to lift the bound from inside
        try:
            resource.setrlimit(lim, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (ValueError, OSError):
            pass
    return torch.nn.functional.softmax(
        (query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])).masked_fill(
            torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).triu(1) if is_causal
            else torch.zeros(query.shape[-2], key.shape[-2], dtype=torch.bool), float("-inf")), -1) @ value
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("honesty")
    jobs = {
        name: (
            build("ex09", tmp / name / "sub.ipynb", replace={"ex09_tiled_attention": src}),
            "ex09",
        )
        for name, src in (("dense", DENSE), ("lift", LIFT))
    }
    return grade_many(jobs)


@pytest.mark.parametrize("name", ["dense", "lift"])
def test_dense_attention_cannot_pass_the_blockwise_item(name, graded):
    results, notes = graded[name]
    r = results["ex09_tiled_attention"]
    assert (r.points, r.status) == (0.0, "memory limit"), f"{r.status}: {r.message} {notes}"
    assert "(L, S) matrix does not fit" in r.message
    others = [
        f"{o.id}: {o.status}"
        for o in results.values()
        if o.id != "ex09_tiled_attention" and not o.passed
    ]
    assert not others, others


# ---- ex05 and ex08: the evidence is the parent's ---------------------------------------------
# Hooks, attributes, frames and the job file: what a student could reach when the model and the
# device lived in their process (the old attacks: a cleared forward hook, ``fn.__self__.kernel_s``).
NO_CACHE = """
def greedy_generate(model, prompt, n_new):
    for obj in (model, getattr(model, "tok", None)):  # clear any counter the grader put here
        for name in ("_forward_hooks", "_forward_pre_hooks"):
            getattr(obj, name, {}).clear()
    ids = prompt
    for _ in range(n_new):  # the uncached O(T^2) loop
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids
"""
FRESH_CACHES = """
def greedy_generate(model, prompt, n_new):
    ids = prompt
    for _ in range(n_new):  # caches "used", but the whole prefix is re-fed to fresh ones every step
        ids = torch.cat([ids, model(ids, model.new_caches())[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids
"""
# The job file the child reads holds every case value it is sent: rebuild the model from its
# seed and decode locally (right tokens, nothing fed to the grader's model).
JOB_SEED = """
import json, sys
from mha_course import TinyCausalLM


def greedy_generate(model, prompt, n_new):
    job = json.load(open(sys.argv[-2] + "/job.json"))
    cases = [it["cases"] for nb in job["notebooks"] for it in nb["items"] if it["id"] == "ex05_greedy_generate"][0]
    for case in cases:  # (seed, num_layers, prompt, n_new): the case whose n_new and layers match
        if case[3]["value"] == n_new and case[1]["value"] == model.num_layers:
            torch.manual_seed(case[0]["value"])
            local = TinyCausalLM(vocab_size=16, embed_dim=32, num_heads=4, num_layers=model.num_layers).double().eval()
            ids = prompt
            for _ in range(n_new):  # uncached, on the local copy: the grader's model is never fed
                ids = torch.cat([ids, local(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
            return ids
"""
NO_TIMING = """
import gc, sys


def time_call(fn, new_event, synchronize, repeats, warmup):
    for _ in range(warmup + repeats):
        fn()
    synchronize()
    kernel_ms = None
    with contextlib.suppress(Exception):  # the old hole: the device's true kernel time
        kernel_ms = fn.__self__.kernel_s * 1e3
    for obj in gc.get_objects():  # any device-like object in this process
        with contextlib.suppress(Exception):
            if hasattr(obj, "durations_ms"):
                return list(obj.durations_ms[-repeats:])
    frame = sys._getframe(1)  # the driver's arguments
    kernel_ms = kernel_ms or frame.f_locals.get("kernel_ms")
    return [kernel_ms] * repeats
"""
JOB_TIMES = """
import json, sys
from mha_course.benchmark.simulated import VirtualDevice


def time_call(fn, new_event, synchronize, repeats, warmup):
    job = json.load(open(sys.argv[-2] + "/job.json"))
    cases = [it["cases"] for nb in job["notebooks"] for it in nb["items"] if it["id"] == "ex08_time_call"][0]
    for case in cases:  # (kernel_ms, jitter, seed, repeats, warmup)
        if case[3]["value"] == repeats and case[4]["value"] == warmup:
            local = VirtualDevice(case[0]["value"], 500.0, case[1]["value"], case[2]["value"])
            for _ in range(warmup + repeats):
                local.launch()
    for _ in range(warmup + repeats):
        fn()  # the launches the grader counts
    start, end = new_event(), new_event()
    start.record()
    end.record()
    synchronize()
    start.elapsed_time(end)  # one read, so events were "used"
    return local.durations_ms[-repeats:]
"""
# Forged channel messages (the socket is in the student's process, so they can write anything).
_RAW = """
import struct
from mha_grader.sandbox import channel


def _raw(payload: bytes) -> None:
    sock = channel.client()._sock
    sock.sendall(payload)
    with contextlib.suppress(Exception):
        sock.recv(1 << 16)
"""
HUGE = (
    _RAW
    + """

def greedy_generate(model, prompt, n_new):
    _raw(struct.pack(">I", 2**31 - 1) + b"{")  # a 2 GiB frame
    return prompt
"""
)
WRONG_OP = (
    _RAW
    + """

def time_call(fn, new_event, synchronize, repeats, warmup):
    with contextlib.suppress(Exception):
        channel.client().call("durations")  # an op no proxy sends
    return [1.0] * repeats
"""
)
BAD_IDS = """
from mha_grader.sandbox import channel


def greedy_generate(model, prompt, n_new):
    with contextlib.suppress(Exception):
        channel.client().call("forward", ids=[[10**6, -1]], caches=None)  # ids outside [0, V)
    caches = model.new_caches()
    ids, step = prompt, prompt
    for _ in range(n_new):
        nxt = model(step, caches)[:, -1].argmax(-1, keepdim=True)
        ids, step = torch.cat([ids, nxt], dim=1), nxt
    return ids
"""
# Reset the token counter: run the uncached loop, then close the session and open a fresh one.
REOPEN = """
from mha_grader.sandbox import channel


def greedy_generate(model, prompt, n_new):
    ids = prompt
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    c = channel.client()
    with contextlib.suppress(Exception):
        c.call("end")
        c.call("begin", item="ex05_greedy_generate", case=0 if ids.shape[0] == 2 else 1)
    return ids
"""
HAMMER = """
def greedy_generate(model, prompt, n_new):
    big = torch.zeros(64, 64, dtype=torch.long)
    for _ in range(20000):  # full forwards done by the PARENT, whose CPU is outside our limits
        try:
            model(big)
        except Exception:
            break
    return prompt
"""
ATTACKS = {  # name: (exercise, item, source)
    "no_cache_hooks_cleared": ("ex05", "ex05_greedy_generate", NO_CACHE),
    "prefix_refed_to_fresh_caches": ("ex05", "ex05_greedy_generate", FRESH_CACHES),
    "model_seed_from_job_file": ("ex05", "ex05_greedy_generate", JOB_SEED),
    "kernel_times_from_the_process": ("ex08", "ex08_time_call", NO_TIMING),
    "kernel_times_from_job_file": ("ex08", "ex08_time_call", JOB_TIMES),
    "forged_huge_frame": ("ex05", "ex05_greedy_generate", HUGE),
    "forged_wrong_op": ("ex08", "ex08_time_call", WRONG_OP),
    "forged_ids_out_of_range": ("ex05", "ex05_greedy_generate", BAD_IDS),
    "forged_session_reopened": ("ex05", "ex05_greedy_generate", REOPEN),
    "parent_cpu_hammered": ("ex05", "ex05_greedy_generate", HAMMER),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Each attack graded on its item alone (one sandboxed child each)."""
    tmp = tmp_path_factory.mktemp("served")

    def one(name):
        ex, item_id, src = ATTACKS[name]
        path = build(ex, tmp / name / "sub.ipynb", replace={item_id: "import contextlib\n" + src})
        item = next(it for it in items_for(ex) if it.id == item_id)
        ((results, notes),) = grade_submission(
            {resolve(ex): path}, {resolve(ex): [item]}, 7, TEST_LIMITS
        ).values()
        return name, (results[0], notes)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, ATTACKS))


@pytest.mark.parametrize("name", ["no_cache_hooks_cleared", "prefix_refed_to_fresh_caches"])
def test_the_parent_counts_the_tokens(name, served):
    r, notes = served[name]
    assert (r.points, r.status) == (0.0, "wrong values"), f"{r.status}: {r.message} {notes}"
    assert "no cache used" in r.message, r.message


@pytest.mark.parametrize(
    "name",
    ["model_seed_from_job_file", "kernel_times_from_the_process", "kernel_times_from_job_file"],
)
def test_the_evidence_is_not_in_the_sandbox(name, served):
    r, notes = served[name]
    assert r.points == 0.0 and not r.passed, f"{name} got full marks: {r.message}"


@pytest.mark.parametrize(
    "name",
    [
        "forged_huge_frame",
        "forged_wrong_op",
        "forged_ids_out_of_range",
        "forged_session_reopened",
        "parent_cpu_hammered",
    ],
)
def test_forged_channel_messages_are_invalid(name, served):
    r, notes = served[name]
    assert (r.points, r.status) == (0.0, "invalid result"), f"{r.status}: {r.message} {notes}"
    assert "channel was misused" in r.message, r.message


def test_hammering_the_parent_is_cut_off_at_once(served):
    """Without the cap (served_model.FED_CAP) the hammer ran until the student's wall limit and
    got "timeout" (17.7 s here), the parent computing every forward; with it: a few seconds."""
    r, notes = served["parent_cpu_hammered"]
    assert "fed more than" in r.message, r.message
