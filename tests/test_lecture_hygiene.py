"""Two ways a notebook can go wrong that nbval cannot see (issue 32).

1. **Code in a markdown cell.** Code pasted into prose is never run: the checks it claims are not
   made, and the page reads as garbage ("...exactly 0.padded = explore(...)"). A markdown line is
   code when, outside fenced blocks, inline code and maths, it (or the part after a sentence's full
   stop, where code was glued onto prose) parses as a Python statement that does something: an
   assignment from a call, subscript or comprehension, an ``assert``, an ``import``, a ``def`` or
   ``for`` header, or a bare call with arguments or a method call (``print(...)``, ``plt.show()``).
   Prose does not parse as Python, and the few prose lines that do (``x = 3`` at a line's end) are
   not calls.
2. **A graded item's solution in a lecture.** The body of every ``### BEGIN SOLUTION`` block in
   ``solutions/`` is normalised (comments, hints, blank lines and spacing dropped); a lecture cell,
   its source or its printed output, must not hold ``WINDOW`` of its consecutive lines. A lecture
   may teach the formula a task asks for (one or two lines); it may not print the answer.

Each detector is proved on the defect it was written for (the ``caught`` tests), so a change that
blinds it fails here too.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
LECTURES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("ex*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("ex*.ipynb"))
WINDOW = 5  # consecutive normalised solution lines that may not appear in a lecture

# ---------------------------------------------------------------------------------------------
# 1. code in markdown

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE_MATH = re.compile(r"\$[^$\n]+\$")
_SENTENCE_END = re.compile(r"[.:;!?](?=\S)|[.:;!?]\s+")


def _prose_lines(markdown: str) -> list[str]:
    """The lines of a markdown cell that a reader sees as prose: fenced blocks, maths and inline
    code removed, HTML comments dropped."""
    text = _DISPLAY_MATH.sub(" ", re.sub(r"<!--.*?-->", " ", markdown, flags=re.S))
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_INLINE_MATH.sub(" ", _INLINE_CODE.sub(" ", line)))
    return lines


def _does_something(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Assert, ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        value = node.value
        return value is not None and any(
            isinstance(
                n,
                (
                    ast.Call,
                    ast.Subscript,
                    ast.ListComp,
                    ast.DictComp,
                    ast.SetComp,
                    ast.GeneratorExp,
                    ast.Lambda,
                ),
            )
            for n in ast.walk(value)
        )
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        call = node.value
        return bool(call.args or call.keywords) or isinstance(call.func, ast.Attribute)
    return False


def _parse_statement(text: str) -> ast.stmt | None:
    """The one statement ``text`` is (a block header such as ``for x in y:`` completed with a
    body), or None."""
    text = text.strip()
    if not text or text.startswith("#"):
        return None
    if text.endswith(":"):
        text += " pass"
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    if isinstance(node, (ast.For, ast.While, ast.With, ast.If)) and not text.endswith(" pass"):
        return None
    if isinstance(node, (ast.FunctionDef, ast.For, ast.With)):
        return node
    return node if _does_something(node) else None


def code_lines(markdown: str) -> list[str]:
    """The lines of a markdown cell that are Python code outside code spans."""
    found = []
    lines = [line.strip().lstrip(">").strip() for line in _prose_lines(markdown)]
    for index, stripped in enumerate(lines):
        starts = [stripped] + [stripped[m.end() :] for m in _SENTENCE_END.finditer(stripped)]
        # A statement may continue on the next lines (a call's arguments): try up to 5 more.
        candidates = [
            start + "".join("\n" + more for more in lines[index + 1 : index + 1 + extra])
            for start in starts
            for extra in range(6)
        ]
        if any(_parse_statement(c) is not None for c in candidates):
            found.append(stripped)
    return found


def _markdown_cells(paths):
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                yield f"{path.relative_to(ROOT)} cell {index}", cell.source


def test_code_detector_catches_the_chapter_11_paste():
    # The two cells of chapter 11 as they were before issue 32 (code glued onto prose).
    temperature = (
        "The previous-token head at three temperatures. Lower temperature = larger score gaps"
        " = sharper weights\n(chapter 1's hard lookup); higher = flatter (an average):\n"
        "peaks = [explore(head=1, temperature=tau).weights[1:].max(-1).values.mean() for tau"
        " in temperatures]\nassert peaks[0] > peaks[1] > peaks[2]  # lower temperature, sharper\n"
    )
    masks = (
        "The **next-token** head under the three masks. Hatched cells are forbidden by the mask; "
        'their weight is exactly 0.padded = explore(head=3, mask="padding")\n'
        'pads = [j for j, t in enumerate(padded.tokens) if t == "<pad>"]\n'
        'print("padding: weight on the <pad> columns:", padded.weights[:, pads].abs().max().item(),\n'
        "      \"| 'mat' spreads evenly over the 6 real words:\",\n"
        "      torch.allclose(padded.weights[5, :6], torch.full((6,), 1 / 6, dtype=torch.float64)))\n"
    )
    assert len(code_lines(temperature)) == 2
    assert len(code_lines(masks)) == 3


def test_code_detector_leaves_prose_code_spans_and_maths_alone():
    prose = (
        "Lower temperature = larger score gaps = sharper weights.\n"
        "With `weights = softmax(scores)` and $y = f(x)$, at G = 1 the cache is H times smaller.\n"
        "```python\nout = attention(q, k, v)\n```\n"
        "- **Causal.** The loop stops at the block's last row (`hi`).\n"
        "| H | G | bytes |\n|---|---|---|\n"
        "Attention(Q, K, V) = softmax(QKᵀ / √d_k) V\n"
    )
    assert code_lines(prose) == []


@pytest.mark.parametrize(
    "path", LECTURES + SOLUTIONS + EXERCISES, ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_code_in_markdown(path):
    bad = [
        f"{where}: {line!r}"
        for where, source in _markdown_cells([path])
        for line in code_lines(source)
    ]
    assert not bad, (
        "code in a markdown cell is never run; move it into a code cell (or into "
        "backticks / a fenced block if it is only shown):\n" + "\n".join(bad)
    )


# ---------------------------------------------------------------------------------------------
# 2. graded solutions inside lectures

_SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


def _strip_comments(code: str) -> str:
    try:
        tokens = [
            t
            for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type != tokenize.COMMENT
        ]
        return tokenize.untokenize(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return re.sub(r"(?m)\s+#.*$|^\s*#.*$", "", code)


def normalised_lines(code: str) -> list[str]:
    """Code lines without comments, blank lines or spacing differences (``a+b`` == ``a + b``)."""
    lines = []
    for line in _strip_comments(code).splitlines():
        line = re.sub(r"\s+", "", line)
        if line:
            lines.append(line)
    return lines


def solution_bodies() -> list[tuple[str, list[str]]]:
    bodies = []
    for path in SOLUTIONS:
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            for n, match in enumerate(_SOLUTION.finditer(cell.source)):
                bodies.append(
                    (f"{path.name} cell {index} block {n}", normalised_lines(match.group(1)))
                )
    return bodies


def _lecture_texts(path: Path):
    """Each cell's source and each of its printed outputs (a cell can print a solution it
    never spells out, e.g. with inspect.getsource)."""
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        yield f"cell {index} source", cell.source
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            if text:
                yield f"cell {index} output", text if isinstance(text, str) else "".join(text)


def solution_leaks(text: str, bodies, window: int = WINDOW) -> list[str]:
    lines = normalised_lines(text)
    joined = "\n" + "\n".join(lines) + "\n"
    leaks = []
    for name, body in bodies:
        for start in range(len(body) - window + 1):
            if "\n" + "\n".join(body[start : start + window]) + "\n" in joined:
                leaks.append(f"{name} (lines {start + 1}-{start + window} of {len(body)})")
                break
    return leaks


def test_solution_detector_catches_a_printed_kernel():
    # Chapter 17 before issue 32 printed its forward kernel (inspect.getsource), whose loop is
    # ex17's graded flash_fwd_kernel: the detector must see it in an output, comments and all.
    # The kernel's text is read from the package's source file (wherever the package keeps it),
    # so this needs neither Triton nor the module's import path.
    bodies = solution_bodies()
    assert any(name.startswith("ex17") for name, _ in bodies)
    (source,) = [
        p for p in (ROOT / "mha_course").rglob("*.py") if "def _fwd_kernel(" in p.read_text()
    ]
    text = source.read_text()
    kernel = next(
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef) and node.name == "_fwd_kernel"
    )
    printed = "\n".join(text.splitlines()[kernel.lineno - 1 : kernel.end_lineno])
    assert any(leak.startswith("ex17") for leak in solution_leaks(printed, bodies))


def test_solution_detector_ignores_spacing_and_comments():
    body = [("t", normalised_lines("a = f(x)  # one\nb = g(a)\n\nc = a+b\nd = c*2\ne = d - 1\n"))]
    shown = "print('x')\na = f( x )\nb = g(a)  # other words\nc = a + b\nd = c * 2\ne = d-1\n"
    assert solution_leaks(shown, body) == ["t (lines 1-5 of 5)"]
    assert solution_leaks("a = f(x)\nb = g(a)\nc = a + b\nd = c * 2\n", body) == []


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.name)
def test_no_graded_solution_in_a_lecture(path):
    bodies = solution_bodies()
    assert bodies, "no ### BEGIN SOLUTION blocks found in solutions/"
    bad = [
        f"{path.name} {where}: {leak}"
        for where, text in _lecture_texts(path)
        for leak in solution_leaks(text, bodies)
    ]
    assert not bad, (
        "a lecture shows the solution of a graded item (a learner can copy it); "
        "describe it instead:\n" + "\n".join(bad)
    )
