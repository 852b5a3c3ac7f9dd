"""The one format a child may send back to the parent, and the parent's reader that trusts nothing.

Each unit writes into its own results folder ``out/<unit dir>/`` (``u0``, ``u1``...; the parent
reads a unit's items only from its folder, see ``unit_dir``). Per item:

- ``<item id>.json`` (at most ``MAX_STATUS_BYTES``)::

      {"status": "ok" | "missing function" | "forbidden API" | "not implemented" | "error"
                 | "memory limit" | "wrong type" | "not compiled",
       # a failure may DESCRIBE itself, never in free text (see feedback.py):
       "exception": "<a built-in exception's name>", "cell": <int>, "line": <int>,
       "forbidden": ["<a forbidden dotted name>", ...], "got": "<a return kind>",
       "module": "<the top-level module a ModuleNotFoundError could not find>",
       "verdict": "refused" | "unavailable" | "too long",   # "not compiled" (defs_only.py)
       "outputs": [[{"dtype": "float32", "shape": [2, 5, 8]}, ...], ...]}   # per case, per output

  ``outputs`` is present only (and then required) when the status is ``"ok"``.
- ``<item id>__c<case>_o<output>.npy``: each declared array as a raw, uncompressed ``.npy`` file
  (format 1.0/2.0/3.0, C order, no pickle). Nothing compressed, so nothing can inflate: the file
  size must equal the header plus exactly ``prod(shape) * itemsize`` bytes.
- ``cells.json``: the unit's failing cells, as feedback reports (``write_cells`` / ``read_cells``).

The parent checks the schema and the declared shapes and dtypes BEFORE reading any array, caps
each array (``MAX_ARRAY_BYTES``) and their total (``MAX_TOTAL_BYTES``), opens files without
following links, and reads them only after the sandbox is gone. Anything else -> ``Invalid``,
which the runner reports as ``"invalid result"`` for that item only.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

import numpy as np

from mha_grader import syntax
from mha_grader.sandbox.defs_only import VERDICTS

CHILD_STATUSES = frozenset(
    {
        "ok",
        "missing function",
        "forbidden API",
        "not implemented",
        "error",
        "memory limit",
        "wrong type",
        "not compiled",
    }
)
DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"}
)
MAX_STATUS_BYTES = 64 * 1024
MAX_NAME = 200
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_. ]{0,60}$")
# The only details a failure may carry: short words and ints, checked again by feedback.py.
DETAILS = {
    "exception": lambda v: isinstance(v, str) and bool(_WORD.match(v)),
    "cell": lambda v: type(v) is int and 0 <= v < 100_000,
    "line": lambda v: type(v) is int and 0 < v <= 100_000,
    "forbidden": lambda v: (
        isinstance(v, list)
        and len(v) <= 32
        and all(
            isinstance(n, str) and len(n) <= MAX_NAME and _WORD.match(n.replace(".", "_")[:61])
            for n in v
        )
    ),
    "got": lambda v: isinstance(v, str) and bool(_WORD.match(v)),
    "module": lambda v: (
        isinstance(v, str) and bool(_WORD.match(v))
    ),  # rendered only if feedback.py knows it
    "verdict": lambda v: v in VERDICTS,
}
MAX_CASES, MAX_OUTPUTS, MAX_NDIM = 64, 8, 8
MAX_ARRAY_BYTES = 160 * 2**20
MAX_TOTAL_BYTES = 512 * 2**20
_ID = re.compile(r"^[A-Za-z0-9_]{1,80}$")


class Invalid(ValueError):
    """The child's result breaks the protocol (the item gets ``"invalid result"``)."""


def array_name(item_id: str, case: int, output: int) -> str:
    return f"{item_id}__c{case}_o{output}.npy"


# ---------------------------------------------------------------- child side (runs in the sandbox)


def _create(path: str):
    """A new file at ``path``: whatever the submission put there (a link...) is removed first."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    return os.fdopen(fd, "wb")


def write_result(out_dir: str, item_id: str, status: dict, arrays: list[list[np.ndarray]]) -> None:
    """Write one item's status and arrays in the protocol's format (the child's only output)."""
    doc = {"status": status["status"], **{k: status[k] for k in DETAILS if k in status}}
    if status["status"] == "ok":
        doc["outputs"] = [
            [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in outs] for outs in arrays
        ]
        for i, outs in enumerate(arrays):
            for j, a in enumerate(outs):
                with _create(os.path.join(out_dir, array_name(item_id, i, j))) as f:
                    np.lib.format.write_array(
                        f, np.array(a, order="C", copy=True), allow_pickle=False
                    )
    with _create(os.path.join(out_dir, f"{item_id}.json")) as f:
        f.write(json.dumps(doc).encode("utf-8"))


def write_cells(out_dir: str, errors: list[dict]) -> None:
    """The unit's failing cells (``cells.json``: a list of feedback reports, checked by the parent)."""
    with _create(os.path.join(out_dir, "cells.json")) as f:
        f.write(json.dumps(errors).encode("utf-8"))


# ---------------------------------------------------------------- parent side (trusts nothing)


def unit_dir(out_dir: Path, name: str) -> Path | None:
    """A unit's results folder ``out/<name>`` if it is a real folder (not a link), else ``None``."""
    p = out_dir / name
    try:
        return p if stat.S_ISDIR(os.lstat(p).st_mode) else None
    except OSError:
        return None


def read_cells(unit: Path, limit: int = 50) -> list:
    """The unit's ``cells.json`` (at most ``limit`` reports; each is checked again by feedback.py)."""
    try:
        doc = json.loads(_read_capped(unit / "cells.json", MAX_STATUS_BYTES).decode("utf-8"))
    except (Invalid, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return []
    return doc[:limit] if isinstance(doc, list) else []


def _open_regular(path: Path, cap: int) -> int:
    """A descriptor of a regular file of at most ``cap`` bytes, opened without following a link."""
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError as e:
        raise Invalid(f"cannot open {path.name} ({type(e).__name__})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
        os.close(fd)
        raise Invalid(
            f"{path.name} is not a regular file"
            if not stat.S_ISREG(st.st_mode)
            else f"{path.name} is larger than {cap} bytes"
        )
    return fd


def _read_capped(path: Path, cap: int) -> bytes:
    """Bytes of a regular file opened without following a link; ``Invalid`` if larger than ``cap``."""
    fd = _open_regular(path, cap)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(cap + 1)
        if len(data) > cap:
            raise Invalid(f"{path.name} is larger than {cap} bytes")
        return data
    finally:
        os.close(fd)


def parse_status(raw: bytes) -> dict:
    """Schema check of an item's status JSON; returns it with ``outputs`` as (dtype, shape) pairs."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise Invalid("status is not JSON") from None
    if not isinstance(doc, dict) or set(doc) - {"status", "outputs", *DETAILS}:
        raise Invalid("status: unexpected fields")
    status = doc.get("status")
    if status not in CHILD_STATUSES:
        raise Invalid("status: not one of the protocol's statuses")
    out = {"status": status}
    for k, ok in DETAILS.items():
        if k in doc:
            if not ok(doc[k]):
                raise Invalid(f"{k}: not what the protocol allows")
            out[k] = doc[k]
    if status != "ok":
        if "outputs" in doc:
            raise Invalid("outputs given with a failure status")
        return out
    cases = doc.get("outputs")
    if not isinstance(cases, list) or not 0 < len(cases) <= MAX_CASES:
        raise Invalid("outputs: expected a list per case")
    decl, total = [], 0
    for outs in cases:
        if not isinstance(outs, list) or not 0 < len(outs) <= MAX_OUTPUTS:
            raise Invalid("outputs: expected 1 to 8 arrays per case")
        row = []
        for a in outs:
            if not isinstance(a, dict) or set(a) != {"dtype", "shape"} or a["dtype"] not in DTYPES:
                raise Invalid("outputs: each array needs a known dtype and a shape")
            shape = a["shape"]
            if (
                not isinstance(shape, list)
                or len(shape) > MAX_NDIM
                or not all(type(n) is int and 0 <= n <= 2**31 for n in shape)
            ):
                raise Invalid("outputs: a shape is a short list of non-negative ints")
            nbytes = math.prod(shape) * np.dtype(a["dtype"]).itemsize
            if nbytes > MAX_ARRAY_BYTES:
                raise Invalid(f"an array declares {nbytes} bytes (limit {MAX_ARRAY_BYTES})")
            total += nbytes
            row.append((np.dtype(a["dtype"]), tuple(shape)))
        decl.append(row)
    if total > MAX_TOTAL_BYTES:
        raise Invalid(f"the arrays declare {total} bytes in all (limit {MAX_TOTAL_BYTES})")
    out["outputs"] = decl
    return out


# The longest ``.npy`` header read (numpy's own ``np.load`` default ``max_header_size``). A header
# is parsed under the grading process's one syntax lock (``syntax.py``), which every student's
# thread shares: a child's 64 KiB header of a long tuple held it for 60 ms; 10,000 bytes bound that
# near 10 ms, and a real header here is under 200 bytes.
MAX_HEADER = 10_000


def read_array(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A raw ``.npy`` whose header must say exactly ``dtype``/``shape``, C order, no extra bytes."""
    nbytes = math.prod(shape) * dtype.itemsize
    fd = _open_regular(path, nbytes + MAX_HEADER + 16)
    try:
        return _read_array(fd, path, dtype, shape, nbytes)
    finally:
        os.close(fd)


def _read_array(
    fd: int, path: Path, dtype: np.dtype, shape: tuple[int, ...], nbytes: int
) -> np.ndarray:
    data = os.pread(fd, MAX_HEADER + 16, 0)  # the header (the body is read straight into the array)
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        raise Invalid(f"{path.name}: not an .npy file")
    major = data[6]
    if major == 1:
        hlen, start = int.from_bytes(data[8:10], "little"), 10
    elif major in (2, 3):
        hlen, start = int.from_bytes(data[8:12], "little"), 12
    else:
        raise Invalid(f"{path.name}: unknown .npy version")
    if hlen > MAX_HEADER or start + hlen > len(data):
        raise Invalid(f"{path.name}: bad header")
    try:
        header = data[start : start + hlen].decode("latin1" if major < 3 else "utf-8")
        meta = syntax.literal(header.strip())
    except Exception:
        raise Invalid(f"{path.name}: unreadable header") from None
    if (
        not isinstance(meta, dict)
        or set(meta) != {"descr", "fortran_order", "shape"}
        or meta["fortran_order"] is not False
        or not isinstance(meta["descr"], str)
    ):
        raise Invalid(f"{path.name}: unexpected header")
    try:
        got = np.dtype(meta["descr"])
    except TypeError:
        raise Invalid(f"{path.name}: unknown dtype") from None
    if got != dtype or got.hasobject or tuple(meta["shape"]) != shape:
        raise Invalid(f"{path.name}: header differs from the declared dtype/shape")
    size = os.fstat(fd).st_size - (start + hlen)
    if size != nbytes:
        raise Invalid(f"{path.name}: {size} data bytes, expected {nbytes}")
    arr = np.empty(shape, dtype=got)
    view, done = memoryview(arr.reshape(-1).view(np.uint8)), 0
    while done < nbytes:
        n = os.preadv(fd, [view[done:]], start + hlen + done)
        if n <= 0:
            raise Invalid(f"{path.name}: shorter than its header says")
        done += n
    return arr


def read_result(out_dir: Path, item_id: str, budget: int | None = None) -> dict:
    """An item's result as ``{"status", details..., "outputs": [[arrays]]}``; ``Invalid`` if broken
    or if its arrays declare more than ``budget`` bytes (what is left of the student's budget:
    checked BEFORE any array is read).

    Raises ``FileNotFoundError`` when the child wrote nothing for the item.
    """
    if not _ID.match(item_id):
        raise ValueError(f"item_id: expected letters, digits and _, got {item_id!r}")
    js = out_dir / f"{item_id}.json"
    if not os.path.lexists(js):
        raise FileNotFoundError(js)
    doc = parse_status(_read_capped(js, MAX_STATUS_BYTES))
    if doc["status"] == "ok" and budget is not None:
        total = sum(math.prod(shape) * dt.itemsize for outs in doc["outputs"] for dt, shape in outs)
        if total > budget:
            raise Invalid(
                f"its arrays declare {total} bytes, more than the {max(budget, 0)} left of "
                "the student's budget for results"
            )
    if doc["status"] == "ok":
        doc["outputs"] = [
            [
                read_array(out_dir / array_name(item_id, i, j), dt, shape)
                for j, (dt, shape) in enumerate(outs)
            ]
            for i, outs in enumerate(doc["outputs"])
        ]
    return doc


# ---------------------------------------------------------------- progress: the stage grammar
# The child reports where it is, one line per stage, on the progress STREAM (a pipe, the job's
# ``progress_fd``; the zygote also keeps the last line in ``out/progress`` for itself):
# ``setup``; per unit (in job order) ``cell <unit> <cell index>`` for each cell, ``item <item
# id>`` for each item, then ``unit <unit> end``; finally ``done``. The parent derives the same
# list from the job (``stage_plan``), reads every line in order, and requires each to come LATER
# in that list than the one before (``stage_clock._StageClock``): a cell that writes the progress it
# inherited can neither go back (``setup`` again, its own cell again), name a stage of its own,
# nor name later stages early (the harness names them again when they start: a repeat), so
# every stage gets one wall allowance at most, timed by the parent's clock alone.

SETUP, DONE = "setup", "done"
MAX_STAGE = 100  # characters of one progress line
NEXT_JOB_BYTES = 16 * 2**20  # the most a held child's next job may take (sandbox/watch.py)


def cell_stage(unit: str, index: int) -> str:
    return f"cell {unit} {index}"


def item_stage(item_id: str) -> str:
    return f"item {item_id}"


def unit_end_stage(unit: str) -> str:
    return f"unit {unit} end"


def stage_plan(spec: dict) -> list[str]:
    """Every stage a child runs for ``spec`` (the job: ``notebooks`` of units), in order."""
    plan = [SETUP]
    for nb in spec["notebooks"]:
        plan += [cell_stage(nb["name"], c["index"]) for c in nb["cells"]]
        plan += [item_stage(it["id"]) for it in nb["items"]]
        plan.append(unit_end_stage(nb["name"]))
    return [*plan, DONE]


def finished_items(plan: list[str], stage: str) -> set[str]:
    """Item ids the harness finished before ``stage`` (an accepted stage of ``plan``)."""
    if stage not in plan:
        return set()
    return {s.split(" ", 1)[1] for s in plan[: plan.index(stage)] if s.startswith("item ")}


def parse_cell_stage(stage: str) -> tuple[str, int] | None:
    """``(unit, cell index)`` of a ``cell`` stage, else ``None``."""
    words = stage.split()
    if len(words) == 3 and words[0] == "cell" and words[2].isdigit():
        return words[1], int(words[2])
    return None


def parse_item_stage(stage: str) -> str | None:
    words = stage.split()
    return words[1] if len(words) == 2 and words[0] == "item" else None
