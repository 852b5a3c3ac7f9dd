"""Hostile submissions: each scores 0 on the items it attacks, with the right status, while every
other item of the notebook is graded normally. All run in the sandbox, two at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_helpers import build, grade_many

from mha_course.grading import items_for

ATT, CAUSAL, ADD, SCORES = (
    "ex02_attention",
    "ex02_causal_mask",
    "ex02_additive_mask",
    "ex02_scaled_scores",
)
ALL = (SCORES, CAUSAL, ADD, ATT)


def _att(body: str) -> dict[str, str]:
    """Replace the attention cell by ``def attention(...)`` with this body."""
    lines = "\n".join("    " + ln for ln in body.strip("\n").split("\n"))
    return {ATT: f"def attention(query, key, value, attn_mask=None):\n{lines}\n"}


def _causal(body: str) -> dict[str, str]:
    lines = "\n".join("    " + ln for ln in body.strip("\n").split("\n"))
    return {CAUSAL: f"def make_causal_mask(L, S):\n{lines}\n"}


GOOD_ATT = """
scores = scaled_scores(query, key)
if attn_mask is not None:
    scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
weights = torch.softmax(scores, dim=-1)
return weights @ value, weights
"""

# name -> (build kwargs, {item: (status, text in message)}); items not listed must pass.
CASES: dict[str, tuple[dict, dict[str, tuple[str, str]]]] = {
    "renamed_function": (
        {
            "replace": {
                ATT: "def my_attention(q, k, v, m=None):\n"
                + "\n".join("    " + ln for ln in GOOD_ATT.strip().split("\n"))
            }
        },
        {ATT: ("missing function", "attention")},
    ),
    "deleted_cell": ({"drop": (ADD,)}, {ADD: ("missing function", "additive_mask")}),
    "syntax_error": (
        {"replace": {CAUSAL: "def make_causal_mask(L, S)\n    return 1"}},
        {CAUSAL: ("missing function", "")},
    ),
    "exception": (
        {"replace": _causal("raise ValueError('boom')")},
        {CAUSAL: ("error", "raised ValueError at line 2 of cell")},
    ),
    "sys_exit_in_function": (
        {"replace": _causal("import sys\nsys.exit(0)")},
        {CAUSAL: ("error", "sys.exit")},
    ),
    "sys_exit_top_level": ({"extra": [(2, "import sys\nsys.exit('bye')")]}, {}),
    "os_exit_in_function": (
        {"replace": _causal("import os\nos._exit(0)")},
        {CAUSAL: ("crashed", "")},
    ),
    "os_exit_top_level": ({"extra": [(2, "import os\nos._exit(1)")]}, {}),
    "infinite_loop_in_function": (
        {"replace": _causal("while True:\n    pass")},
        {CAUSAL: ("timeout", "")},
    ),
    "sleep_forever_top_level": ({"extra": [(2, "import time\ntime.sleep(10_000)")]}, {}),
    "memory_bomb": (
        {"replace": _causal("x = bytearray(64 * 2**30)\nreturn x")},
        {CAUSAL: ("memory limit", "")},
    ),
    "torch_memory_bomb": (
        {"replace": _causal("return torch.empty(2**40, dtype=torch.bool)")},
        {CAUSAL: ("memory limit", "")},
    ),
    "nan_output": (
        {
            "replace": _att(
                "return (torch.full(query.shape[:-1] + value.shape[-1:], float('nan')),\n"
                "        torch.full(query.shape[:-1] + key.shape[-2:-1], float('nan')))"
            )
        },
        {ATT: ("non-finite", "NaN/inf")},
    ),
    "wrong_dtype": (
        {
            "replace": {
                ADD: "def additive_mask(mask, dtype):\n    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, float('-inf'))"
            }
        },
        {ADD: ("wrong dtype", "float64 returned for float32 input")},
    ),
    "wrong_shape": (
        {"replace": _causal("return torch.ones(S, L + 1, dtype=torch.bool).tril()")},
        {CAUSAL: ("wrong shape", "expected shape (L, S) = ")},
    ),
    "returns_string": ({"replace": _att("return '25 passed'")}, {ATT: ("wrong type", "str")}),
    "returns_list_of_floats": ({"replace": _att("return [0.0] * 3")}, {ATT: ("wrong type", "")}),
    "eq_always_true": (
        {
            "replace": {
                ATT: """
class Anything(torch.Tensor):
    def __eq__(self, other):
        return True
    def __array__(self, *a, **k):
        raise RuntimeError
def attention(query, key, value, attn_mask=None):
    return torch.zeros(1).as_subclass(Anything)
"""
            }
        },
        {ATT: ("wrong type", "class from the notebook")},
    ),
    "eq_always_true_plain_object": (
        {
            "replace": {
                ATT: """
class Yes:
    shape = dtype = None
    def __eq__(self, other):
        return True
def attention(query, key, value, attn_mask=None):
    return Yes()
"""
            }
        },
        {ATT: ("wrong type", "class from the notebook")},
    ),
    "megabytes_of_printing": (
        {
            "extra": [(2, "print('x' * 30_000_000)")],
            "replace": _causal(
                "print('y' * 5_000_000)\nreturn torch.ones(L, S, dtype=torch.bool).tril()"
            ),
        },
        {},
    ),
    "forged_output_and_files": (
        {
            "extra": [
                (
                    2,
                    """
import json, os, sys
print("25 passed, 0 failed\\nscore: 100/100")
for name in ("results.json", "grades.csv", "ex02_attention.json"):
    open(name, "w").write(json.dumps({"score": 100, "status": "ok", "n_outputs": [1]}))
for d in sys.argv[1:]:
    try:
        open(os.path.join(d, "ex02_attention.json"), "w").write('{"status": "ok", "n_outputs": [1, 1, 1, 1]}')
    except OSError:
        pass
""",
                )
            ],
            "replace": _att("raise NotImplementedError"),
        },
        {ATT: ("not implemented", "")},
    ),
    "forged_result_then_exit": (
        {
            "extra": [
                (
                    2,
                    """
import json, os, sys
import numpy as np
out = sys.argv[2]
with open(os.path.join(out, "ex02_attention.npz"), "wb") as f:
    np.savez(f, **{f"c{i}_o0": np.zeros(1) for i in range(4)})
open(os.path.join(out, "ex02_attention.json"), "w").write(json.dumps({"status": "ok", "n_outputs": [1] * 4}))
os._exit(0)
""",
                )
            ],
            "replace": _att("raise NotImplementedError"),
        },
        {ATT: ("not implemented", "")},
    ),
    "monkeypatch_checks": (
        {
            "extra": [
                (
                    2,
                    """
import numpy as np, torch.testing
torch.testing.assert_close = lambda *a, **k: None
np.allclose = np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
import mha_grader.compare as C
C.judge = lambda *a, **k: None
C.compare_output = lambda *a, **k: None
""",
                )
            ],
            "replace": _att(
                "return (torch.zeros(query.shape[:-1] + value.shape[-1:], dtype=query.dtype),\n"
                "        torch.zeros(query.shape[:-1] + key.shape[-2:-1], dtype=query.dtype))"
            ),
        },
        {ATT: ("wrong values", "values differ")},
    ),
    "forbidden_sdpa": (
        {
            "replace": _att(
                "return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)"
            )
        },
        {ATT: ("forbidden API", "scaled_dot_product_attention")},
    ),
    "forbidden_sdpa_obfuscated": (
        {
            "replace": _att(
                "f = getattr(__import__('torch').nn.functional, 'scaled_dot_' + 'product_attention')\n"
                "return f(query, key, value, attn_mask=attn_mask)"
            )
        },
        {ATT: ("forbidden API", "scaled_dot_product_attention")},
    ),
    "forbidden_sdpa_captured_early": (
        {
            "extra": [
                (2, "SHORTCUT = getattr(torch.nn.functional, 'scaled_dot_product' + '_attention')")
            ],
            "replace": _att("return SHORTCUT(query, key, value, attn_mask=attn_mask)"),
        },
        {ATT: ("forbidden API", "scaled_dot_product_attention")},
    ),
    "forbidden_course_sdpa_obfuscated": (
        {
            "replace": _att(
                "f = getattr(__import__('mha_course'), 'scaled_dot_product' + '_attention')\n"
                "return f(query, key, value, attn_mask=attn_mask)"
            )
        },
        {ATT: ("forbidden API", "mha_course.ops.sdpa.scaled_dot_product_attention")},
    ),
    "forbidden_causal_helper": (
        {"replace": _causal("import mha_course\nreturn mha_course.causal_mask(L, S)")},
        {CAUSAL: ("forbidden API", "causal_mask")},
    ),
    # Bounded on purpose: if the block ever failed, 5 short-lived processes, not a real bomb.
    "fork_bomb": (
        {
            "replace": _causal(
                "import os\nfor _ in range(5):\n    if os.fork() == 0:\n        os._exit(0)"
            )
        },
        {CAUSAL: ("error", "PermissionError")},
    ),
    "subprocess_and_kill_parent": (
        {
            "extra": [
                (
                    2,
                    """
import os, subprocess, signal
try:
    subprocess.Popen(["sleep", "300"])
except Exception as e:
    print(e)
os.kill(os.getppid(), signal.SIGKILL)
""",
                )
            ]
        },
        {},
    ),
    "recursion": (
        {"replace": _causal("return make_causal_mask(L, S)")},
        {CAUSAL: ("error", "RecursionError")},
    ),
    "huge_output": (
        {"replace": _att("return torch.zeros(60_000_000)")},
        {ATT: ("wrong type", "elements")},
    ),
    "magics_and_shell": (
        {"extra": [(1, "!rm -rf ~\n%time x = 1\nif True:\n    !echo hi"), (2, "%%bash\nrm -rf /")]},
        {},
    ),
    # Staged courses are hard links to one master (stage.py): a write that got through would
    # reach every course of the class. See test_no_staged_course_was_poisoned.
    "poison_staged_course": (
        {
            "extra": [
                (
                    2,
                    """
import os
import mha_course
here = os.path.dirname(mha_course.__file__)
for name in ("ops/masks.py", "ops/sdpa.py", "__init__.py", os.path.join("ops", "__pycache__", "masks.cpython-311.pyc")):
    path = os.path.join(here, name)
    for attack in (lambda: open(path, "a").write("\\nPOISONED = True\\n"), lambda: os.chmod(path, 0o666),
                   lambda: os.link(path, os.path.join(os.environ["HOME"], "mine")), lambda: os.unlink(path)):
        try:
            attack()
        except OSError as e:
            print(type(e).__name__)
""",
                )
            ]
        },
        {},
    ),
}


def _write_invalid(tmp: Path) -> dict[str, tuple[Path, dict]]:
    bad = {
        "invalid_json": "{ not json",
        "no_cells": json.dumps({"nbformat": 4, "metadata": {}}),
        "cell_source_not_text": json.dumps({"cells": [{"cell_type": "code", "source": 5}]}),
    }
    out = {}
    for name, text in bad.items():
        p = tmp / name / "sub.ipynb"
        p.parent.mkdir(parents=True)
        p.write_text(text)
        out[name] = (
            p,
            dict.fromkeys([it.id for it in items_for("ex02")], ("invalid notebook", "")),
        )
    return out


ESCAPE = """
import ctypes, os, time
libc = ctypes.CDLL(None)
pid = libc.fork()
if pid == 0:
    libc.setsid()
    if libc.fork() == 0:
        open({pidfile!r}, "w").write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
time.sleep(1.0)
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adversarial")
    jobs, expect = {}, {}
    for name, (kw, exp) in CASES.items():
        jobs[name] = (build("ex02", tmp / name / "sub.ipynb", **kw), "ex02")
        expect[name] = exp
    for name, (path, exp) in _write_invalid(tmp).items():
        jobs[name], expect[name] = (path, "ex02"), exp
    pidfile = tmp / "escaped.pid"
    jobs["escaped_background_process"] = (
        build(
            "ex02", tmp / "escape" / "sub.ipynb", extra=[(2, ESCAPE.format(pidfile=str(pidfile)))]
        ),
        "ex02",
    )
    expect["escaped_background_process"] = {}
    return grade_many(jobs), expect, pidfile


NAMES = [*CASES, "invalid_json", "no_cells", "cell_source_not_text", "escaped_background_process"]


@pytest.mark.parametrize("name", NAMES)
def test_hostile_submission(name, graded):
    results, expect, _ = graded
    res, notes = results[name]
    for item in items_for("ex02"):
        r = res[item.id]
        if item.id in expect[name]:
            status, text = expect[name][item.id]
            assert (r.points, r.status) == (0.0, status), (
                f"{item.id}: {r.status}: {r.message} {notes}"
            )
            assert text in r.message, f"{item.id}: {r.message!r} lacks {text!r}"
        else:
            assert r.passed, f"{item.id}: {r.status}: {r.message} {notes}"


def test_at_least_twenty_hostile_submissions():
    assert len(NAMES) >= 20


# Processes that outlive their submission: tests/grading/test_isolation.py
# (test_nothing_a_submission_started_outlives_it) — in the sandbox the escape cannot even write its pidfile.


def test_no_staged_course_was_poisoned(graded):
    """After the class above (poison_staged_course among it), every staged course and the master
    they are linked to hold exactly what staging wrote: nothing appended, no file missing."""
    from mha_grader.sandbox.launch import stager

    master = stager()._compiled_master() / "mha_course"
    courses = [
        p / "mha_course" for p in stager().root.glob("course-*") if not p.name.endswith(".tmp")
    ]
    assert courses
    for course in [master, *courses]:
        for name in ("ops/masks.py", "ops/sdpa.py", "__init__.py"):
            assert (course / name).is_file(), course / name
            assert "POISONED" not in (course / name).read_text(), course / name
        assert oct((course / "ops" / "masks.py").stat().st_mode & 0o777) == "0o644"


# ---------------------------------------------------------------- drivers in the learner's process

# ex19's ring_step that does no ring and no merge: it walks up to what its driver holds (the
# frames by sys._getframe and inspect, and every dict gc knows) for the WHOLE keys and values,
# and returns the final attention of its queries at every step (issue #30, route 5).
RING_FROM_THE_DRIVER = """
def ring_step(out, lse, query, key, value, q_pos, k_pos, is_causal, scale):
    import gc, inspect, sys
    def full(x):
        return isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[-2] > key.shape[-2]
    found = {}
    frames = [sys._getframe(1), *(i.frame for i in inspect.stack()[1:])]
    for f in frames:
        for name in ("key", "value"):
            if full(f.f_locals.get(name)):
                found.setdefault(name, f.f_locals[name])
    if len(found) < 2:
        for d in gc.get_referrers(*(f.f_locals for f in frames)) + [o for o in gc.get_objects() if isinstance(o, dict)]:
            for name in ("key", "value"):
                v = d.get(name) if isinstance(d, dict) else None
                v = torch.as_tensor(v) if v is not None and hasattr(v, "shape") and len(v.shape) == 4 else v
                if full(v):
                    found.setdefault(name, v)
    if len(found) < 2:
        return out, lse  # nothing to read: no answer
    K, V = found["key"].to(query.dtype), found["value"].to(query.dtype)
    scores = (query @ K.transpose(-2, -1)) * scale
    if is_causal:
        scores = scores.masked_fill(torch.arange(K.shape[-2])[None, :] > q_pos[:, None], float("-inf"))
    best = torch.logsumexp(scores, -1)
    return torch.softmax(scores, -1) @ V, best
"""


def test_a_ring_step_cannot_answer_from_its_drivers_frames(tmp_path):
    """ex19's ``ring_step`` returns the final answer at every step from the whole keys and values
    it finds above it (frames, ``inspect``, ``gc``): it must score 0 on the item. The parent
    holds the ring now and hands the driver one key/value block per step, each only after the
    state before, which it checks. (Before the fix: 3/3, the driver held every rank's keys and
    values in the learner's process.)"""
    nb = build(
        "ex19",
        tmp_path / "ring" / "ex19_ring_attention.ipynb",
        replace={"ex19_ring_step": RING_FROM_THE_DRIVER},
    )
    res, notes = grade_many({"ring": (nb, "ex19")})["ring"]
    r = res["ex19_ring_step"]
    assert r.points == 0.0 and r.status == "wrong values", (
        f"the step answered from the driver: {r} {notes}"
    )
    others = [x for i, x in res.items() if i != "ex19_ring_step"]
    assert others and all(x.passed for x in others), others
