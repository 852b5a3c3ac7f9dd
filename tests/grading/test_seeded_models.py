"""Issue 19, class 10: the parent's references and served models come from explicit generators.

Many threads build ex05's served model and ex10's gradient model at once while other threads
re-seed and draw from torch's global generator (as other workers and notebook helpers do): every
build must equal the one made alone for its seed. With the models seeded from the global
generator (``torch.manual_seed`` under ``fork_rng``) builds came out wrong here.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from mha_course.grading.chapters import ch05, ch10

SEEDS = [11, 2**61 + 5, 977, 4242]


def _ex05(seed):
    return ch05._build(seed, 2)


def _ex10(seed):
    return ch10._grads_model(seed, 7, 2, 2, 8, 6)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_concurrent_builds_are_all_right():
    alone = {(f.__name__, s): f(s) for f in (_ex05, _ex10) for s in SEEDS}
    stop = threading.Event()

    def reseed(k: int) -> None:  # another worker using torch's global generator
        while not stop.is_set():
            torch.manual_seed(k)
            torch.randn(64)

    hammers = [threading.Thread(target=reseed, args=(k,), daemon=True) for k in range(2)]
    for t in hammers:
        t.start()
    jobs = [(f, s) for _ in range(12) for f in (_ex05, _ex10) for s in SEEDS]
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            built = list(pool.map(lambda job: (job, job[0](job[1])), jobs))
    finally:
        stop.set()
        for t in hammers:
            t.join()
    wrong = [(f.__name__, s) for (f, s), m in built if not _same(m, alone[(f.__name__, s)])]
    assert len(built) == 96 and wrong == [], (
        f"{len(wrong)} of {len(built)} builds wrong: {wrong[:5]}"
    )


def test_a_seed_gives_its_own_weights():
    assert not _same(_ex05(1), _ex05(2)) and _same(_ex05(3), _ex05(3))
