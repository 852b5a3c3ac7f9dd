"""Issue 19, class 7: no channel between two units of one student through file-system metadata.

A unit may not read another unit's results, but it could reach them BY NAME: a link's target,
a file's existence, an extended attribute, a time, or list them. Every unit of the submission
(the notebook's top-level cell runs in each) leaves a token in its results folder and on what
all units reach (the progress file) by one route; ex02's forbidden item is right only if its
unit finds a token left by an EARLIER unit. Bubblewrap, units confined by Landlock.
"""

from __future__ import annotations

import sys
import uuid

import pytest
from grading_helpers import build, grade_many

from mha_grader.sandbox import confine, isolation

CAUSAL = "ex02_causal_mask"
TOKEN = uuid.uuid4().hex[:16]
T = int(TOKEN[:8], 16)  # a time (seconds) that carries the token
HARNESS = """import os, sys
def _harness(name):
    f = sys._getframe()
    while f is not None and name not in f.f_locals:
        f = f.f_back
    return None if f is None else f.f_locals[name]
"""
ROUTES = {  # name -> (what each unit leaves, in its folder `mine` / the results folder `out`; the test on an earlier unit's folder `d`)
    "link_target": (
        "os.symlink({TOKEN!r}, os.path.join(mine, 'flag'))",
        "os.readlink(os.path.join(d, 'flag')) == {TOKEN!r}",
    ),
    "file_name": (
        "open(os.path.join(mine, {TOKEN!r}), 'w').close()",
        "os.path.lexists(os.path.join(d, {TOKEN!r}))",
    ),
    "listing": (
        "open(os.path.join(mine, 'x' + {TOKEN!r}), 'w').close()",
        "('x' + {TOKEN!r}) in os.listdir(d)",
    ),
    "xattr": (
        "os.setxattr(mine, 'user.flag', {TOKEN!r}.encode())",
        "os.getxattr(d, 'user.flag') == {TOKEN!r}.encode()",
    ),
    "mtime": ("os.utime(mine, ({T}, {T}))", "int(os.stat(d).st_mtime) == {T}"),
    "progress_mtime": (
        "os.utime(os.path.join(out, 'progress'), ({T}, {T}))",
        "int(os.stat(os.path.join(out, 'progress')).st_mtime) == {T}",
    ),
}


def _fill(s: str) -> str:
    return s.replace("{TOKEN!r}", repr(TOKEN)).replace("{T}", str(T))


def _submission(tmp, route):
    leave, seen = ROUTES[route]
    cell = (
        HARNESS
        + f"""mine = _harness("unit_out")
out = os.path.dirname(mine) if mine else None
try:
    {_fill(leave)}
except OSError:
    pass
"""
    )
    probe = (
        HARNESS
        + f"""def make_causal_mask(L, S):
    mine = _harness("out_dir")
    out = os.path.dirname(mine)
    for k in range(int(os.path.basename(mine)[1:])):
        d = os.path.join(out, f"u{{k}}")
        try:
            if {_fill(seen)}:
                return torch.tril(torch.ones(L, S, dtype=torch.bool))
        except OSError:
            pass
    raise RuntimeError("no earlier unit left anything")
"""
    )
    return build("ex02", tmp / route / "sub.ipynb", replace={CAUSAL: probe}, extra=[(2, cell)])


def test_no_metadata_passes_between_units(tmp_path, monkeypatch):
    if not sys.platform.startswith("linux") or isolation.bwrap_problem() or confine.problem():
        pytest.skip(
            f"needs bubblewrap and Landlock units: {isolation.bwrap_problem() or confine.problem()}"
        )
    monkeypatch.setenv(isolation.ENV_VAR, "bwrap")
    monkeypatch.setenv(confine.ENV_VAR, "landlock")
    results = grade_many({r: (_submission(tmp_path, r), "ex02") for r in ROUTES})
    open_routes = {
        r: (res[CAUSAL].status, notes)
        for r, (res, notes) in results.items()
        if res[CAUSAL].status != "error"
    }
    assert open_routes == {}, open_routes
    for r, (res, notes) in results.items():
        assert all(x.passed for i, x in res.items() if i != CAUSAL), (r, res, notes)
