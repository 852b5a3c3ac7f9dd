"""ex16's serving reference: the rule "only a step that preempted nobody admits" is implied by the others
(the preempted request waits at the front of the queue and cannot fit in what its release freed, less the
block the preempting request took), so a loop that ignores it returns the same five outputs on every
trace: it cannot be graded, and the exercise says why instead of pretending to (issue 32)."""

from __future__ import annotations

import numpy as np

from mha_course.grading.chapters import ch16_serve as S


def test_ignoring_the_admission_rule_changes_no_output():
    preempting = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        case = S._trace(rng, int(rng.integers(2, 5)), tight=True)
        for num_blocks in range(2, case["num_blocks"] + 1):  # every pool size, down to two blocks
            c = dict(case, num_blocks=num_blocks)
            ref = S._accounting(c)
            if not ref[2].sum():
                continue
            preempting += 1
            alt = S._accounting(c, "admits after preemption")
            assert all(np.array_equal(a, b) for a, b in zip(ref, alt)), (seed, num_blocks)
    assert preempting > 300, preempting  # the traces do preempt: the comparison is not vacuous
