"""The grading process judges with one torch thread while it grades a submission (threads.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from mha_grader import runner
from mha_grader.sandbox.threads import one_torch_thread


def test_one_thread_in_every_grading_thread_then_restored():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:

        def job(_):
            with one_torch_thread():
                with one_torch_thread():  # nested: still one, and the outer call restores
                    inner = torch.get_num_threads()
                return inner, torch.get_num_threads()

        with ThreadPoolExecutor(2) as pool:  # as classroom.grade_class runs students
            assert list(pool.map(job, range(6))) == [(1, 1)] * 6
        with one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_grade_submission_judges_with_one_thread(monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "_grade", lambda *a: seen.append(torch.get_num_threads()) or {})
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert runner.grade_submission({}, {}, 0, isolation_mode="none") == {}
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
