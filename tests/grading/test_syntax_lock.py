"""The grading process builds syntax trees one thread at a time (CPython 3.11's ``ast.parse``
shares its recursion counter between threads, python/cpython#106905: a CI run lost an honest
student's ex02 to "SystemError: AST constructor recursion depth mismatch" while a classmate was
planned beside them). A stand-in ``ast.parse`` that notices a second thread inside it proves every
parse the parent does goes through the lock, and the course's files are parsed once."""

from __future__ import annotations

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mha_grader import substitute, syntax
from mha_grader.registry import all_items
from mha_grader.sandbox import protocol
from mha_grader.stage import locate


@pytest.fixture
def watched(monkeypatch):
    real, inside, seen = ast.parse, [0], {"overlap": 0, "calls": 0}
    guard = threading.Lock()

    def parse(*args, **kwargs):
        with guard:
            inside[0] += 1
            seen["calls"] += 1
            seen["overlap"] += inside[0] > 1
        time.sleep(0.002)  # leave room for another thread to come in
        try:
            return real(*args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(ast, "parse", parse)
    monkeypatch.setattr(syntax, "_PARSED", {})
    return seen


def _npy(tmp_path, i):
    p = tmp_path / f"a{i}.npy"
    np.save(p, np.arange(i + 1, dtype=np.float64))
    return p


@pytest.mark.parametrize(
    "work",
    [
        pytest.param(lambda tmp, i: substitute.stubbed(all_items()[:3]), id="substitutes_stubbed"),
        pytest.param(
            lambda tmp, i: locate("mha_course.ops.sdpa.scaled_dot_product_attention"),
            id="forbidden_name_located",
        ),
        pytest.param(
            lambda tmp, i: protocol.read_array(_npy(tmp, i), np.dtype(np.float64), (i + 1,)),
            id="npy_header_read",
        ),
    ],
)
def test_no_two_threads_parse_at_once(watched, tmp_path, work):
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: work(tmp_path, i), range(16)))
    assert watched["calls"] > 0, "the work parsed nothing: the stand-in is not on the path"
    assert watched["overlap"] == 0, f"{watched['overlap']} parses ran beside another"


def test_the_course_files_are_parsed_once(watched):
    substitute.stubbed(all_items())
    first = watched["calls"]
    substitute.stubbed(all_items())
    locate("mha_course.ops.sdpa.scaled_dot_product_attention")
    assert first > 0 and watched["calls"] - first <= 1


def test_an_oversized_npy_header_is_refused_before_it_is_parsed(watched, tmp_path):
    """A child's header is parsed under the lock every student's thread shares: one too long to
    be numpy's (a 60 KB tuple, 60 ms of parsing) is an invalid result without being parsed."""
    header = ("{'descr': '<f8', 'fortran_order': False, 'shape': (" + "1," * 30_000 + ")}").encode()
    path = tmp_path / "a.npy"
    path.write_bytes(b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little") + header + b"\n")
    with pytest.raises(protocol.Invalid):
        protocol.read_array(path, np.dtype(np.float64), (1,))
    assert watched["calls"] == 0
