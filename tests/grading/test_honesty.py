"""Honesty checks the student's code cannot reach (attack classes 7 and 8).

ex09 ``blockwise_attention``: "never build the (L, S) matrix" is a memory bound the KERNEL
enforces: the item runs in a child of its own whose hard RLIMIT_AS is lowered (address space
after start-up + ``memory_mb``) before any submission code runs, and its large case's full
(L, S) scores matrix (256 MiB) does not fit. One line of dense softmax attention — full marks
before — now gets "memory limit"; the blockwise solution keeps full marks (test_solutions)."""

from __future__ import annotations

import pytest
from grading_helpers import build, grade_many

DENSE = '''
def blockwise_attention(query, key, value, block_q, block_k, is_causal):
    return torch.nn.functional.softmax(
        (query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])).masked_fill(
            torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).triu(1) if is_causal
            else torch.zeros(query.shape[-2], key.shape[-2], dtype=torch.bool), float("-inf")), -1) @ value
'''
LIFT = '''
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
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("honesty")
    jobs = {name: (build("ex09", tmp / name / "sub.ipynb", replace={"ex09_tiled_attention": src}), "ex09")
            for name, src in (("dense", DENSE), ("lift", LIFT))}
    return grade_many(jobs)


@pytest.mark.parametrize("name", ["dense", "lift"])
def test_dense_attention_cannot_pass_the_blockwise_item(name, graded):
    results, notes = graded[name]
    r = results["ex09_tiled_attention"]
    assert (r.points, r.status) == (0.0, "memory limit"), f"{r.status}: {r.message} {notes}"
    assert "(L, S) matrix does not fit" in r.message
    others = [f"{o.id}: {o.status}" for o in results.values() if o.id != "ex09_tiled_attention" and not o.passed]
    assert not others, others


# ---- NOT yet out of reach (strict xfail: these flip to failures the day the hole is closed) ------
# ex05's "the cache was used" is a forward hook on the model the student's code receives, and
# ex08's simulated device lives in the student's process with its kernel time as an attribute.
# Closing them needs the evidence outside the sandbox: the parent serving the model (counting the
# tokens it is fed) and the simulated device (sleeping the secret kernel times itself) over pipes.
NO_CACHE = '''
def greedy_generate(model, prompt, n_new):
    model.tok._forward_hooks.clear()  # the grader's token counter
    ids = prompt
    for _ in range(n_new):  # the uncached O(T^2) loop
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids
'''
NO_TIMING = '''
def time_call(fn, synchronize, repeats, warmup):
    kernel_ms = fn.__self__.kernel_s * 1e3  # the simulated device's true kernel time
    for _ in range(warmup + repeats):
        fn()
    synchronize()
    return [kernel_ms] * repeats
'''


@pytest.fixture(scope="module")
def in_reach(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("in_reach")
    return grade_many({"ex05": (build("ex05", tmp / "ex05" / "sub.ipynb", replace={"ex05_greedy_generate": NO_CACHE}), "ex05"),
                       "ex08": (build("ex08", tmp / "ex08" / "sub.ipynb", replace={"ex08_time_call": NO_TIMING}), "ex08")})


@pytest.mark.xfail(strict=True, reason="ex05's cache counter is still inside the student's process")
def test_clearing_the_cache_counter_does_not_pass(in_reach):
    r = in_reach["ex05"][0]["ex05_greedy_generate"]
    assert not r.passed, "the uncached loop with the counter cleared got full marks"


@pytest.mark.xfail(strict=True, reason="ex08's simulated device is still inside the student's process")
def test_reading_the_kernel_time_does_not_pass(in_reach):
    r = in_reach["ex08"][0]["ex08_time_call"]
    assert not r.passed, "returning the device's kernel time without timing got full marks"
