"""Run All on an untouched exercise reaches "Check your work" (issue 23): self-check cells carry
the ``raises-exception`` tag (JupyterLab and nbclient go on past them) and graded-test cells only
report; under nbgrader (``NBGRADER_EXECUTION`` set) a failing item still raises, so it scores 0."""

from __future__ import annotations

import nbformat
import numpy as np
import pytest
from grading_helpers import EXERCISES, ROOT
from nbclient import NotebookClient

from mha_course.grading.nbgrader_tests import ItemFailed, assert_item


def test_run_all_on_the_stubs_reaches_check_your_work(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = nbformat.read(EXERCISES / "ex01_dot_product_attention.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(EXERCISES)}}
    ).execute()  # raises on a stop
    text = lambda c: "".join(o.get("text", "") for o in c.get("outputs", []))  # noqa: E731
    last = nb.cells[-1]
    assert 'check("ex01")' in last.source and "score: 0/5" in text(last), text(last)
    tests = [
        c
        for c in nb.cells
        if "graded-check" in c.metadata.get("tags", []) and "assert_item" in c.source
    ]
    assert tests and all("not passed yet" in text(c) for c in tests)
    errors = [
        c for c in nb.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert errors and all("raises-exception" in c.metadata.get("tags", []) for c in errors)


def test_a_failing_item_raises_only_where_a_grade_is_computed(monkeypatch, capsys):
    ns = {"np": np, "softmax": lambda x: np.exp(x) / np.exp(x).sum()}
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("MHA_STRICT_TESTS", raising=False)
    assert_item("ex01_softmax", namespace=ns)
    assert 'not passed yet (stuck? hint("ex01", 1)' in capsys.readouterr().out
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(ItemFailed):
        assert_item("ex01_softmax", namespace=ns)
