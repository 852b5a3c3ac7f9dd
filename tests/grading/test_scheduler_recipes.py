"""classroom/schedulers/ (issue #31 item 9): the GitHub Actions matrix, the Slurm job array and the
Kubernetes Indexed Job that grade a class in shards, run here as their scheduler would run them.

Each recipe is parsed; its shard command line is run for every index with the scheduler's own
variable set (``matrix.shard``; ``SLURM_ARRAY_TASK_ID``/``SLURM_ARRAY_TASK_COUNT``;
``JOB_COMPLETION_INDEX``), every shard at once (separate processes, one key), each line first
parsed by ``mha-course``'s own parser; then the recipe's merge line. The merged gradebook must
equal one unsharded run of the same class with the same key: ``grades.csv``, and every student's
``results.json`` and ``feedback.md``. The recipes' N (8) is checked against their own index
ranges, and run here with N = 2 on a class of 4 (the machine has 2 cores).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from grading_helpers import EXERCISES, ROOT, SOLUTIONS

from mha_course.cli import build_parser
from mha_grader.keys import new_key_file
from mha_grader.registry import notebooks

RECIPES = ROOT / "classroom" / "schedulers"
EX01 = "ex01_dot_product_attention.ipynb"
N = 2  # shards run here
EX01_POINTS = sum(it.points for it in notebooks()[EX01.removesuffix(".ipynb")])
pytestmark = pytest.mark.slow


def _github() -> tuple[list[str], str, dict[str, str]]:
    """(shard line per K, merge line, env) of the workflow; its matrix is 1..SHARDS."""
    wf = yaml.safe_load((RECIPES / "github-actions.yml").read_text())
    shards = int(wf["env"]["SHARDS"])
    job = wf["jobs"]["shard"]
    assert job["strategy"]["matrix"]["shard"] == list(range(1, shards + 1))
    (line,) = [s["run"] for s in job["steps"] if "mha-course grade" in s.get("run", "")]
    line = line.removeprefix('sudo -E env "PATH=$PATH" ')  # root already, or not: the same grade
    (merge,) = [s["run"] for s in wf["jobs"]["merge"]["steps"] if "mha-course merge" in s.get("run", "")]  # fmt: skip
    return [line.replace("${{ matrix.shard }}", str(k)) for k in range(1, N + 1)], merge, {}


def _slurm() -> tuple[list[str], str, dict[str, str]]:
    text = (RECIPES / "slurm.sbatch").read_text()
    (lo, hi) = map(int, re.search(r"^#SBATCH --array=(\d+)-(\d+)$", text, re.M).groups())
    assert lo == 1, "the array must start at 1: SLURM_ARRAY_TASK_ID is K"
    assert hi >= 2
    merge = re.search(r'--wrap "(mha-course merge[^"]*)"', text).group(1)
    script = str(RECIPES / "slurm.sbatch")
    return [f"bash {script}"] * N, merge, {"SLURM_ARRAY_TASK_COUNT": str(N)}


def _kubernetes() -> tuple[list[str], str, dict[str, str]]:
    grade, merge = yaml.safe_load_all((RECIPES / "kubernetes-indexed-job.yml").read_text())
    spec = grade["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    shards = int({e["name"]: e["value"] for e in container["env"]}["SHARDS"])
    assert spec["completionMode"] == "Indexed" and spec["completions"] == shards
    (line,) = container["args"]
    (mline,) = merge["spec"]["template"]["spec"]["containers"][0]["args"]
    return [line.replace("/key/class.key", "class.key")] * N, mline, {"SHARDS": str(N)}


def _index_env(recipe: str, k: int) -> dict[str, str]:
    """The scheduler's index variables for shard ``k`` (1-based)."""
    return {
        "github": {},
        "slurm": {"SLURM_ARRAY_TASK_ID": str(k), "SLURM_CPUS_PER_TASK": "2"},
        "kubernetes": {"JOB_COMPLETION_INDEX": str(k - 1)},
    }[recipe]


def _cli_argv(line: str, env: dict[str, str], cwd: Path) -> list[str]:
    """The ``mha-course`` words a line runs, as bash expands them (a script: its last line)."""
    if line.startswith("bash "):
        line = Path(line.split()[1]).read_text().strip().splitlines()[-1]
    words = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {line}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert words[0] == "mha-course", words
    return words[1:]


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> Path:
    """Four students (right, untouched, right, broken ex01), one key, one unsharded run."""
    tmp = tmp_path_factory.mktemp("sched")
    sub = tmp / "submissions"
    for name, src in (("alice", SOLUTIONS), ("bob", EXERCISES), ("carol", SOLUTIONS)):
        (sub / name).mkdir(parents=True)
        shutil.copy(src / EX01, sub / name / EX01)
    (sub / "dave").mkdir()
    (sub / "dave" / EX01).write_text("{ not json")
    new_key_file(tmp / "class.key")
    done = subprocess.run(
        [*_mha(), "grade", "submissions", "--out", "single", "--key-file", "class.key"]
        + ["--no-progress", "--workers", "2"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp


def _mha() -> list[str]:
    return [sys.executable, "-m", "mha_course.cli"]


def _env(extra: dict[str, str], bindir: Path) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{bindir}:{os.environ['PATH']}", **extra}


@pytest.mark.parametrize("recipe", ["github", "slurm", "kubernetes"])
def test_recipe_shards_in_parallel_merge_to_the_single_run(klass: Path, recipe: str, tmp_path):
    lines, merge, env = {"github": _github, "slurm": _slurm, "kubernetes": _kubernetes}[recipe]()
    work = tmp_path / "work"
    work.mkdir()
    (work / "submissions").symlink_to(klass / "submissions")
    shutil.copy(klass / "class.key", work / "class.key")
    bindir = tmp_path / "bin"  # `mha-course` as installed: this interpreter's CLI
    bindir.mkdir()
    (bindir / "mha-course").write_text(f'#!/bin/sh\nexec {shlex.join(_mha())} "$@"\n')
    (bindir / "mha-course").chmod(0o755)
    parser = build_parser()
    procs = []
    for k, line in enumerate(lines, start=1):
        e = _env({**env, **_index_env(recipe, k), "SHARDS": env.get("SHARDS", str(N))}, bindir)
        argv = _cli_argv(line, e, work)
        args = parser.parse_args(argv)  # a valid invocation, exit 2 otherwise
        assert args.command == "grade" and args.shard == (k, N), (recipe, argv)
        assert args.key_file is not None and args.key_file.name == "class.key", argv
        procs.append(
            subprocess.Popen(
                ["bash", "-c", line],
                cwd=work,
                env=e,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,  # fmt: skip
            )
        )
    for p in procs:  # all N at once, as the scheduler starts them
        out, _ = p.communicate(timeout=900)
        assert p.returncode == 0, out
    e = _env(env, bindir)
    assert parser.parse_args(_cli_argv(merge, e, work)).command == "merge"
    done = subprocess.run(["bash", "-c", merge], cwd=work, env=e, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    single, merged = klass / "single", work / "graded"
    totals = dict(line.split(",")[:2] for line in (single / "grades.csv").read_text().split()[1:])
    assert float(totals["alice"]) == EX01_POINTS and float(totals["bob"]) == 0, totals  # graded
    assert (merged / "grades.csv").read_text() == (single / "grades.csv").read_text()
    for s in ("alice", "bob", "carol", "dave"):
        for name in ("results.json", "feedback.md"):
            assert (merged / s / name).read_text() == (single / s / name).read_text(), (s, name)
