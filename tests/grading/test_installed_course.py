"""Issue 19, class 6: the INSTALLED course is out of every sandbox's reach.

After a normal (wheel) install - what ``classroom/gradescope/setup.sh`` does - the real
``mha_course`` lies in the site-packages that the sandbox must mount; after an editable install
it lies in a checkout. A submission that finds the real ``causal_mask`` source (any
``mha_course/ops/masks.py`` without the staged stub, on ``sys.path`` or at the parent's own path)
and runs it would score ex02's forbidden item. Tried in every isolation mode (``bwrap``,
``user`` when root) and unit mode (Landlock, one sandbox per unit), with a wheel installed into a
fresh venv (the current environment's other packages hard-linked into it, so torch is not
reinstalled) and with the current install; and through the real ``run_autograder``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from grading_helpers import ROOT, build, require_user_mode

from mha_grader.sandbox import isolation

EX02 = "ex02_scaled_dot_product_attention"
CAUSAL = "ex02_causal_mask"
FIND_REAL = """import pathlib, sys
for base in [*sys.path, {REAL!r}]:
    for f in (pathlib.Path(base) / "mha_course" / "ops" / "masks.py", pathlib.Path(base) / "ops" / "masks.py",
              pathlib.Path(base) / "masks.py"):
        try:
            src = f.read_text()
        except OSError:
            continue
        if "ForbiddenCall" in src:  # the staged stub
            continue
        ns = {"__name__": "mha_course.real_masks", "__package__": "mha_course"}
        exec(compile(src, str(f), "exec"), ns)
        return ns["causal_mask"](L, S)
raise RuntimeError("the real course is out of reach")"""
MODES = [("bwrap", "landlock"), ("bwrap", "sandbox")] + (
    [("user", "landlock"), ("user", "sandbox")] if os.geteuid() == 0 else []
)
GRADE = """import json, sys
from mha_course.grading import Limits, grade_submission, items_for
import mha_course
ex = sys.argv[2] if len(sys.argv) > 2 else "ex02"
(res, notes), = grade_submission({ex: sys.argv[1]}, {ex: items_for(ex)}, 7,
                                 Limits(item_timeout=15.0, notebook_timeout=150.0)).values()
print(json.dumps({"course": mha_course.__file__, "notes": notes,
                  "results": {r.id: [r.points, r.status, r.message] for r in res}}))
"""


def _attack(dest: Path, real: str) -> Path:
    body = "\n".join("    " + ln for ln in FIND_REAL.replace("{REAL!r}", repr(real)).split("\n"))
    return build("ex02", dest, replace={CAUSAL: f"def make_causal_mask(L, S):\n{body}\n"})


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` gets every entry of site-packages ``src`` but the course, as hard links."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(src):
        if name.startswith(
            ("mha_course", "mha_grader", "__editable__", "mha-course")
        ) or name.endswith(".pth"):
            continue
        s, d = src / name, dst / name
        if s.is_dir() and not s.is_symlink():
            shutil.copytree(
                s,
                d,
                symlinks=True,
                copy_function=os.link,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        else:
            os.link(s, d, follow_symlinks=False)


@pytest.fixture(scope="module")
def wheel_venv():
    """A venv with the course installed from a freshly built wheel (non-editable)."""
    if not sys.platform.startswith("linux") or isolation.bwrap_problem():
        pytest.skip(f"the OS sandbox is needed: {isolation.bwrap_problem()}")
    site = Path(sysconfig.get_paths()["purelib"])
    parent = (
        None if os.stat(tempfile.gettempdir()).st_dev == os.stat(site).st_dev else site.parents[3]
    )
    top = Path(tempfile.mkdtemp(prefix="mha-wheel-", dir=parent))  # hard links: same file system
    try:
        os.chmod(top, 0o755)  # mode "user": the dedicated uid reads the runtime
        src = top / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            shutil.copy(ROOT / name, src / name)
        for pkg in ("mha_course", "mha_grader"):
            shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(top / "dist"), str(src)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        venv = top / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
        )
        py = venv / "bin" / "python"
        vsite = Path(
            subprocess.run(
                [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                env=_wheel_env(),
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        _link_tree(site, vsite)
        wheel = next((top / "dist").glob("mha_course-*.whl"))
        subprocess.run(
            [
                py,
                "-m",
                "pip",
                "-q",
                "--disable-pip-version-check",
                "install",
                "--no-deps",
                "--no-index",
                str(wheel),
            ],
            env=_wheel_env(),
            check=True,
            capture_output=True,
            timeout=300,
        )
        shutil.rmtree(src)
        yield venv
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _wheel_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("MHA_GRADER_")
    }


def _real(venv: Path, cwd: Path) -> str:
    """Where the wheel venv's Python finds the real ``mha_course``."""
    return subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "import mha_course, os; print(os.path.dirname(mha_course.__file__))",
        ],
        cwd=cwd,
        env=_wheel_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _grade(
    python: Path | str, notebook: Path, mode: str, units: str, cwd: Path, ex: str = "ex02"
) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MHA_GRADER_")}
    if str(python) != sys.executable:
        env = _wheel_env()  # the wheel, not this checkout
    env.update(MHA_GRADER_ISOLATION=mode, MHA_GRADER_UNITS=units)
    proc = subprocess.run(
        [str(python), "-c", GRADE, str(notebook), ex],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(got: dict, install: str) -> None:
    for item, (points, status, message) in got["results"].items():
        if item == CAUSAL:
            assert (points, status) == (0.0, "error"), f"{install}: the real course was read: {got}"
        else:
            assert status == "passed", f"{install}: {item}: {status}: {message} {got['notes']}"


@pytest.mark.parametrize(("mode", "units"), MODES, ids=[f"{m}-{u}" for m, u in MODES])
def test_wheel_install_is_out_of_reach(wheel_venv, tmp_path, mode, units):
    py = wheel_venv / "bin" / "python"
    real = _real(wheel_venv, tmp_path)
    assert real.startswith(str(wheel_venv)), real
    got = _grade(py, _attack(tmp_path / "sub" / f"{EX02}.ipynb", real), mode, units, tmp_path)
    assert got["course"].startswith(str(wheel_venv))
    _check(got, "wheel")


EX17_STEM = "ex17_flash_attention_triton"


@pytest.mark.skipif(os.geteuid() != 0, reason="mode user needs a root grader")
def test_mode_user_with_a_wheel_install_imports_every_installed_package(wheel_venv, tmp_path):
    """Mode ``user`` with a wheel install: the installed course is hidden inside site-packages,
    yet every other installed package imports (Triton for ex17, and a learner's ``mpmath``,
    ``networkx``): the honest ex17 solution gets full marks. (Before the fix: hiding the course
    took site-packages' right to be listed, so any package not imported before confinement was
    "not found": ex17 scored 0.)"""
    nb = build(
        "ex17", tmp_path / "sub" / f"{EX17_STEM}.ipynb", extra=[(-1, "import mpmath, networkx\n")]
    )
    got = _grade(wheel_venv / "bin" / "python", nb, "user", "landlock", tmp_path, ex="ex17")
    bad = {i: r for i, r in got["results"].items() if r[1] != "passed"}
    assert not bad and got["results"], (bad, got["notes"])
    assert not any("cell" in n for n in got["notes"]), got["notes"]


@pytest.mark.parametrize(("mode", "units"), MODES, ids=[f"{m}-{u}" for m, u in MODES])
def test_editable_install_is_out_of_reach(tmp_path, mode, units):
    if isolation.bwrap_problem():
        pytest.skip(f"the OS sandbox is needed: {isolation.bwrap_problem()}")
    import mha_course

    real = os.path.dirname(os.path.realpath(mha_course.__file__))
    if mode == "user":
        require_user_mode()
    got = _grade(
        sys.executable, _attack(tmp_path / "sub" / f"{EX02}.ipynb", real), mode, units, tmp_path
    )
    _check(got, "editable")


@pytest.mark.parametrize(
    "mode",
    [None] + (["user"] if os.geteuid() == 0 else []),
    ids=["auto", "user"][: 1 + (os.geteuid() == 0)],
)
def test_run_autograder_with_a_wheel_install(wheel_venv, tmp_path, mode):
    from test_gradescope import by_name, run_autograder

    real = _real(wheel_venv, tmp_path)
    nb = _attack(tmp_path / "nb" / f"{EX02}.ipynb", real).read_text(encoding="utf-8")
    res = run_autograder(tmp_path, {f"{EX02}.ipynb": nb}, mode, venv=wheel_venv)
    tests = by_name(res)
    assert tests[CAUSAL]["score"] == 0, tests[CAUSAL]
    others = [t for name, t in tests.items() if name.startswith("ex02") and name != CAUSAL]
    assert others and all(t["score"] == t["max_score"] for t in others), others
