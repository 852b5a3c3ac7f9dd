"""The staged course package a sandbox sees: a copy of the source with forbidden functions ABSENT.

For each set of forbidden names (one per notebook) the parent writes a copy of the course package
(``mha_course``) in which every forbidden ``def``/``class`` (``mha_course.mod.name`` or
``mha_course.mod.Class.method``) is replaced, at source level, by a stub that raises
``ForbiddenCall``. Re-exports and package code that bind the name get the stub too, because they
import it from the edited module. No closure, ``importlib.reload``, frame walk or ``inspect`` can
reach the real code: it is not in the sandbox. The engine (``mha_grader``) is staged once, without
edits. Solutions, tests, the repository and the course's grading policy
(``mha_course/grading/``: items, references, mistakes; a stand-in takes its place) are never staged.

Names outside the course package (``torch.nn.functional.scaled_dot_product_attention``...)
cannot be removed from torch; the child tripwires them and the parent looks for them in the
source (see docs/instructor_guide.md, "Security", for what that does and does not stop).

``check_forbidden`` is run when the items load: a forbidden name that resolves to nothing is an
error, not silently skipped.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import py_compile
import secrets
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from mha_grader.syntax import parse, parse_file

COURSE = "mha_course"
ENGINE = "mha_grader"
_STUB = (
    "{ind}def {name}(*args, **kwargs):\n"
    "{ind}    raise __import__('mha_grader.errors', fromlist=['ForbiddenCall'])"
    ".ForbiddenCall({path!r})\n"
)
_CLASS_STUB = (
    "{ind}class {name}:\n"
    "{ind}    def __init__(self, *args, **kwargs):\n"
    "{ind}        raise __import__('mha_grader.errors', fromlist=['ForbiddenCall'])"
    ".ForbiddenCall({path!r})\n"
)


class UnresolvedForbidden(ValueError):
    """A forbidden name that names nothing (a typo, a re-export, a moved function)."""


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot find the package {name!r} to stage")
    return Path(next(iter(spec.submodule_search_locations)))


def _module_file(root: Path, parts: list[str]) -> tuple[Path, list[str]]:
    """``root`` holds ``mha_course/``; the longest module prefix of ``parts`` and the rest."""
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        for f in (base.with_suffix(".py"), base / "__init__.py"):
            if f.is_file() and cut < len(parts):
                return f, parts[cut:]
    raise UnresolvedForbidden(f"{'.'.join(parts)}: no module of the course package defines it")


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's statements, with those of its top-level ``if``/``else`` blocks (the course
    defines its Triton kernels under ``if triton is not None:``, the optional extra)."""
    out = []
    for n in body:
        out += _top_level(n.body + n.orelse) if isinstance(n, ast.If) else [n]
    return out


def _find_def(tree: ast.Module, names: list[str]) -> ast.stmt:
    body, node = _top_level(tree.body), None
    for k, name in enumerate(names):
        hits = [
            n
            for n in body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name == name
        ]
        if not hits:
            raise KeyError(name)
        node = hits[-1]
        if k < len(names) - 1:
            if not isinstance(node, ast.ClassDef):
                raise KeyError(name)
            body = node.body
    return node


def locate(path: str, root: Path | None = None) -> tuple[Path, ast.stmt]:
    """(source file, def/class node) of a forbidden course name; ``UnresolvedForbidden`` if none.

    Only the DEFINING module counts: ``mha_course.ops.sdpa.scaled_dot_product_attention``, not the
    re-export ``mha_course.scaled_dot_product_attention``.
    """
    parts = path.split(".")
    root = root if root is not None else package_dir(COURSE).parent
    file, rest = _module_file(root, parts)
    if len(rest) > 2:
        raise UnresolvedForbidden(f"{path}: expected module.function or module.Class.method")
    try:
        return file, _find_def(parse_file(file), rest)
    except KeyError:
        raise UnresolvedForbidden(
            f"{path}: {file.name} has no def/class {'.'.join(rest)} (name the defining module, "
            "not a re-export)"
        ) from None


def _resolves_outside(path: str) -> bool:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for p in parts[cut:]:
                obj = getattr(obj, p)
        except AttributeError:
            return False
        return True
    return False


def check_forbidden(names: Iterable[str]) -> None:
    """Every forbidden name must resolve: course names to a def in the source, others by import."""
    bad = []
    for name in sorted(set(names)):
        try:
            if name.startswith(COURSE + "."):
                locate(name)
            elif not _resolves_outside(name):
                raise UnresolvedForbidden(f"{name}: cannot be imported")
        except UnresolvedForbidden as e:
            bad.append(str(e))
    if bad:
        raise UnresolvedForbidden("forbidden names that resolve to nothing: " + "; ".join(bad))


def _strip(file: Path, targets: list[tuple[str, list[str]]]) -> None:
    """Replace each forbidden def/class in ``file`` by a stub (line splice; the rest untouched)."""
    text = file.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = parse(text)
    spans = []
    for path, rest in targets:
        node = _find_def(tree, rest)
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        stub = (_CLASS_STUB if isinstance(node, ast.ClassDef) else _STUB).format(
            ind=" " * node.col_offset, name=node.name, path=path
        )
        spans.append((start - 1, node.end_lineno, stub))
    for a, b, stub in sorted(spans, reverse=True):
        lines[a:b] = [stub]
    file.write_text("".join(lines), encoding="utf-8")


def _copy(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))


# The course's grading policy (mha_course/grading/: every item's reference, generator and mistake)
# computes the answers, so no sandbox sees it: the staged course holds this stand-in instead, with
# the two names an exercise's cells call (check: grading happens outside; hint: not shown here).
GRADING = "grading"
_GRADING_STUB = {
    "__init__.py": (
        '"""Not the course\'s grading package: the grader\'s sandbox has no items, references or\n'
        "mistakes. ``check`` does nothing here (the grader grades outside), ``hint`` prints a line;\n"
        'any other name is refused."""\n\n\n'
        "def check(*args, **kwargs):\n    return []\n\n\n"
        "def hint(*args, **kwargs):\n    print('(hints are not shown while the grader runs this notebook)')\n\n\n"
        "def __getattr__(name):\n"
        "    raise __import__('mha_grader.errors', fromlist=['ForbiddenCall'])"
        ".ForbiddenCall('mha_course.grading.' + name)\n"
    ),
    "hints.py": "from . import hint  # noqa: F401\n",
}


# ... and the child's side of items, the policy's ``child/`` folder, staged whole: the drivers that
# call the learner's code, the proxies of the grader's services, the seeded generators they use.
# None of them holds an answer; the folder is the wall (what is not in it, no sandbox sees).
CHILD = "child"


def _staged(name: str) -> bool:
    """Is the module of this course name in a staged copy (all but ``grading/`` outside ``child/``)?"""
    parts = name.split(".")
    return parts[1] != GRADING or (len(parts) > 2 and parts[2] == CHILD)


def _stub_grading(course: Path) -> None:
    """Replace the staged ``mha_course/grading/`` by ``_GRADING_STUB`` and its ``child/`` folder."""
    kept = course.parent / f"{CHILD}.kept"
    shutil.move(course / GRADING / CHILD, kept)
    shutil.rmtree(course / GRADING)
    (course / GRADING).mkdir()
    for name, text in _GRADING_STUB.items():
        (course / GRADING / name).write_text(text, encoding="utf-8")
    shutil.move(kept, course / GRADING / CHILD)


def _link(src: str, dest: str) -> None:
    """``copytree``'s copy function for a staged course: a hard link to the master's file (the
    same file system: both live in the stage's temp folder); a copy where links are refused."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _own(file: Path) -> None:
    """Give ``file`` its own inode (same bytes and times) before it is edited in place."""
    tmp = file.with_name(file.name + ".own")
    shutil.copy2(file, tmp)
    os.replace(tmp, file)


def _precompile(root: Path) -> None:
    """Write the bytecode of every staged module now: the sandbox mounts the stage read-only, so
    each unit would otherwise compile every module it imports from source, every time."""
    import compileall

    if not compileall.compile_dir(str(root), quiet=2, force=True):
        raise RuntimeError(f"staging: a staged module does not compile ({root})")


def _world_readable(root: Path) -> None:
    for d, _dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)


class Stager:
    """Builds (once per forbidden set) and caches staged packages under ``root``."""

    def __init__(self, root: Path, hold: Callable[[Path], None]) -> None:
        """``hold(folder)`` keeps a folder this stager makes alive for the process's lifetime
        (the sandbox's ``space.hold``: a stale-folder sweep skips it)."""
        self.root = Path(root)
        self._hold = hold
        self._lock = threading.Lock()
        self._done: dict[frozenset[str], Path] = {}
        self._master: Path | None = None

    def _compiled_master(self) -> Path:
        """The course package, copied and byte-compiled once, in a folder only we can enter (it
        holds every function: no sandbox may ever see it)."""
        if self._master is None:
            import atexit
            import tempfile

            master = Path(tempfile.mkdtemp(prefix=f"mha-master-{os.getpid()}-"))  # 0700
            self._hold(master)  # alive while we are (space.sweep_stale)
            atexit.register(shutil.rmtree, master, True)
            _copy(package_dir(COURSE), master / COURSE)
            _stub_grading(master / COURSE)
            _precompile(master)
            self._master = master
        return self._master

    def engine(self) -> Path:
        """A folder holding a clean copy of ``mha_grader`` (the child's harness)."""
        with self._lock:
            dest = self.root / "engine"
            if not dest.exists():
                tmp = self.root / "engine.tmp"
                _copy(package_dir(ENGINE), tmp / ENGINE)
                _precompile(tmp)
                _world_readable(tmp)
                tmp.rename(dest)
            return dest

    def course(self, forbidden: Iterable[str]) -> Path:
        """A folder holding ``mha_course`` without the course functions in ``forbidden``."""
        names = frozenset(n for n in forbidden if n.startswith(COURSE + "."))
        with self._lock:
            if names in self._done:
                return self._done[names]
            # Unguessable (defence in depth: a unit must not find a sibling's copy by its name).
            key = secrets.token_hex(16)
            dest = self.root / f"course-{key}"
            tmp = self.root / f"course-{key}.tmp"
            # the compiled master's files, hard-linked (one folder of links per forbidden set,
            # ~40 a class: copying them was 8 s of the first student's staging); each module to
            # edit gets its own file first (_own), so the master and the other copies keep theirs.
            # Links share times, so the bytecode of every untouched module stays valid; only the
            # edited modules are compiled again (py_compile replaces their .pyc with new files).
            shutil.copytree(self._compiled_master() / COURSE, tmp / COURSE, copy_function=_link)
            by_file: dict[Path, list[tuple[str, list[str]]]] = {}
            for name in sorted(n for n in names if _staged(n)):
                locate(name, tmp)  # raises if it names nothing
                file, rest = _module_file(tmp, name.split("."))
                by_file.setdefault(file, []).append((name, rest))
            for file, targets in by_file.items():
                _own(file)
                _strip(file, targets)
                py_compile.compile(str(file), doraise=True)
            _world_readable(tmp)
            tmp.rename(dest)
            self._done[names] = dest
            return dest
