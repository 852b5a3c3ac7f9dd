"""Fast tests of the grading framework's parts (no child processes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mha_course.authoring.solution_blocks import stub_source
from mha_course.grading import all_items, notebooks, resolve
from mha_grader import compare
from mha_grader.classroom import students
from mha_grader.compare import as_arrays, judge, to_framework
from mha_grader.notebook import InvalidNotebook, code_cells, strip_magics
from mha_grader.runner import static_forbidden

ITEMS = all_items()


def test_stub_without_end_marker_is_an_error():
    with pytest.raises(ValueError, match="BEGIN SOLUTION"):
        stub_source("### BEGIN SOLUTION\nx = 1\n")


def test_magics_become_pass_and_cell_magics_are_dropped():
    assert (
        strip_magics("x = 1\n!ls\nif x:\n    %time y = 2")
        == "x = 1\npass  # ls\nif x:\n    pass  # time y = 2"
    )
    assert strip_magics("%%bash\nrm -rf /") is None


def test_code_cells_skip_checks_and_reject_garbage(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("a = 1"),
        nbformat.v4.new_markdown_cell("x"),
        nbformat.v4.new_code_cell("b = 2", metadata={"tags": ["self-check"]}),
        nbformat.v4.new_code_cell("from mha_course.grading import check"),
    ]
    p = tmp_path / "n.ipynb"
    nbformat.write(nb, p)
    assert [c["source"] for c in code_cells(p)] == ["a = 1"]
    p.write_text("[1, 2]")
    with pytest.raises(InvalidNotebook):
        code_cells(p)


def test_static_forbidden_sees_attributes_imports_and_strings():
    names = {"torch.nn.functional.scaled_dot_product_attention"}
    assert static_forbidden([{"source": "F.scaled_dot_product_attention(q, k, v)"}], names) == names
    assert static_forbidden(
        [{"source": "from torch.nn.functional import scaled_dot_product_attention"}], names
    )
    assert static_forbidden([{"source": "getattr(F, 'scaled_dot_product_attention')"}], names)
    assert not static_forbidden(
        [{"source": "def attention(q):\n    '''like scaled_dot_product_attention'''"}], names
    )
    # the name of one of its aliases (another door to the same function) counts as the name
    for alias in (
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention_for_cpu",
    ):
        assert static_forbidden([{"source": f"out, w = torch.{alias}(q, k, v)"}], names) == names
    mha = {"torch.nn.MultiheadAttention"}
    assert static_forbidden([{"source": "torch._native_multi_head_attention(x)"}], mha) == mha


def test_ids_unique_and_named_after_their_notebook():
    assert len({it.id for it in ITEMS}) == len(ITEMS)
    for it in ITEMS:
        assert it.id.split("_")[0] == it.notebook.split("_")[0], it.id
    assert resolve("ex02") == "ex02_scaled_dot_product_attention"
    assert len(notebooks()["ex01_dot_product_attention"]) >= 3
    assert len(notebooks()["ex02_scaled_dot_product_attention"]) >= 4


@pytest.mark.parametrize("item", ITEMS, ids=[it.id for it in ITEMS])
def test_cases_depend_on_the_seed_only(item):
    a, b, c = item.cases(1), item.cases(1), item.cases(2)
    flat = lambda cs: [v for case in cs for v in case.values() if isinstance(v, np.ndarray)]  # noqa: E731
    assert all(
        np.array_equal(x, y, equal_nan=x.dtype.kind == "f") for x, y in zip(flat(a), flat(b))
    )  # NaN: unread keys

    # every item's inputs must change with the seed, or a class could share precomputed answers
    def plain(cs):
        return repr(
            [
                {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in case.items()}
                for case in cs
            ]
        )

    assert plain(a) != plain(c), f"{item.id}: the cases are the same for seeds 1 and 2"


@pytest.mark.parametrize("item", ITEMS, ids=[it.id for it in ITEMS])
def test_reference_passes_and_every_mistake_is_caught(item):
    """Non-vacuous: the reference gets full marks, and each variant loses them with its name."""
    cases = item.cases(0)

    def returned(outs: list) -> list:  # a prediction item's function also returns its prediction
        return [[*o, item.prediction(o)] for o in outs] if item.prediction else outs

    refs = [as_arrays(item.reference(*to_framework(item, c))) for c in cases]
    assert judge(item, cases, {"status": "ok", "outputs": returned(refs)}).passed
    for m in item.mistakes:
        if m.variant is None:
            continue
        outs = [as_arrays(m.variant(*to_framework(item, c))) for c in cases]
        r = judge(item, cases, {"status": "ok", "outputs": returned(outs)})
        assert not r.passed and m.name in r.message, f"{m.name}: {r.status}: {r.message}"


def test_verdicts_name_dtype_shape_and_nan():
    item = next(it for it in ITEMS if it.id == "ex02_attention")
    cases = item.cases(0)
    refs = [as_arrays(item.reference(*to_framework(item, c))) for c in cases]
    r = judge(
        item, cases, {"status": "ok", "outputs": [[x.astype(np.float64), w] for [x, w] in refs]}
    )
    assert r.status == compare.WRONG_DTYPE and "float64 returned for float32 input" in r.message
    r = judge(item, cases, {"status": "ok", "outputs": [[x[..., :1], w] for [x, w] in refs]})
    assert r.status == compare.WRONG_SHAPE and "(..., L, Dv) = (2, 3, 4, 5)" in r.message
    r = judge(
        item, cases, {"status": "ok", "outputs": [[x, w[..., :1]] for [x, w] in refs]}
    )  # output 1's letters
    assert (
        r.status == compare.WRONG_SHAPE
        and "output 1: expected shape (..., L, S) = (2, 3, 4, 6)" in r.message
    ), r.message
    r = judge(item, cases, {"status": "ok", "outputs": [[x * np.nan, w] for [x, w] in refs]})
    assert r.status == compare.NON_FINITE
    r = judge(
        item, cases, {"status": "ok", "outputs": [[x] for [x, w] in refs]}
    )  # the weights left out
    assert r.status == compare.WRONG_TYPE and "expected 2 output(s), got 1" in r.message
    r = judge(item, cases, {"status": "timeout", "message": "took too long"})
    assert (r.points, r.status) == (0.0, "timeout")


def test_serve_feedback_names_which_of_its_five_outputs_is_wrong():
    """ex16's serve returns (used, shared, preemptions, finish, tokens): a wrong one is named, not only
    numbered (it said "output 2: ..."), in class grading and on the public inputs (values shown)."""
    item = next(it for it in ITEMS if it.id == "ex16_serve")
    cases = item.cases(3)
    refs = [as_arrays(item.reference(*to_framework(item, c))) for c in cases]
    for j, name in enumerate(("used", "shared", "preemptions", "finish", "tokens")):
        outs = [[a.copy() for a in ref] for ref in refs]
        outs[0][j].flat[0] += 7  # off in one entry of output j only
        for public in (False, True):
            r = judge(item, cases, {"status": "ok", "outputs": outs}, public=public)
            assert not r.passed and r.message.startswith(f"output {j} ({name}): "), (
                public,
                r.message,
            )


def test_bool_outputs_must_match_exactly():
    item = next(it for it in ITEMS if it.id == "ex02_causal_mask")
    cases = item.cases(0)
    refs = [as_arrays(item.reference(*to_framework(item, c))) for c in cases]
    flipped = [[~x] for [x] in refs]
    assert judge(item, cases, {"status": "ok", "outputs": flipped}).status == compare.WRONG_VALUES


def test_shards_partition_the_class(tmp_path):
    for name in ("zoe", "adam", "mia", "li", "bo"):
        (tmp_path / name).mkdir()
    parts = [students(tmp_path, (k, 3)) for k in (1, 2, 3)]
    assert (
        sorted(sum(parts, [])) == students(tmp_path) == sorted(["zoe", "adam", "mia", "li", "bo"])
    )
    with pytest.raises(ValueError, match="shard"):
        students(tmp_path, (4, 3))


def test_release_writes_and_check_detects_stale(tmp_path):
    from mha_course.cli import main

    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    name = "ex02_scaled_dot_product_attention.ipynb"
    (sol / name).write_bytes((Path(__file__).parents[2] / "solutions" / name).read_bytes())
    argv = ["release", "--solutions", str(sol), "--exercises", str(ex)]
    assert main([*argv, "--check"]) == 1
    assert main(argv) == 0 and main([*argv, "--check"]) == 0
    hints = (
        tmp_path / "mha_course" / "grading" / "hints.json"
    )  # beside exercises/, not the package's
    assert '"ex02_scaled_dot_product_attention"' in hints.read_text()
    hints.write_text("{}")
    assert main([*argv, "--check"]) == 1 and main(argv) == 0
    text = (ex / "ex02_scaled_dot_product_attention.ipynb").read_text()
    assert (
        "NotImplementedError" in text and "BEGIN SOLUTION" not in text and '"outputs": []' in text
    )
    (ex / "ex02_scaled_dot_product_attention.ipynb").write_text(text.replace("Task 1", "Task one"))
    assert main([*argv, "--check"]) == 1


def test_torch_is_the_reference_for_torch_items():
    item = next(it for it in ITEMS if it.id == "ex02_attention")
    for case in item.cases(5):
        q, k, v, m = to_framework(item, case)
        torch.testing.assert_close(
            item.reference(q, k, v, m)[0],
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m),
        )


def test_in_process_check_grades_a_namespace_and_restores_torch(capsys):
    from mha_course.grading import check

    F = torch.nn.functional
    original = F.scaled_dot_product_attention

    def attention(q, k, v, m=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def scaled_scores(q, k):
        return q @ k.transpose(-2, -1)  # no 1/sqrt(D)

    results = {
        r.id: r for r in check("ex02", {"attention": attention, "scaled_scores": scaled_scores})
    }
    assert results["ex02_attention"].status == "forbidden API"
    assert results["ex02_scaled_scores"].status == "wrong values"
    assert "no scaling" in results["ex02_scaled_scores"].message
    assert results["ex02_causal_mask"].status == "missing function"
    assert (
        F.scaled_dot_product_attention is original
        and torch.nn.MultiheadAttention.__module__.startswith("torch")
    )
    out = capsys.readouterr().out
    assert "FAILED" in out and "score: 0/8" in out


def test_judging_in_threads_keeps_seeded_references():
    """`mha-course grade` judges students in threads; references that build seeded torch modules
    (ex05's model) must not be disturbed by other threads drawing from torch's global RNG."""
    from concurrent.futures import ThreadPoolExecutor

    by_id = {it.id: it for it in all_items()}
    jobs = []
    for item_id in ("ex05_greedy_generate", "ex07_gqa_forward", "ex06_cross_attention"):
        if item_id not in by_id:
            continue
        item = by_id[item_id]
        cases = item.cases(7)
        refs = [as_arrays(item.reference(*to_framework(item, c))) for c in cases]
        jobs.append((item, cases, {"status": "ok", "outputs": refs}))
    assert jobs and jobs[0][0].id == "ex05_greedy_generate"
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda j: judge(*j), jobs * 12))
    assert all(r.passed for r in results), [r.message for r in results if not r.passed][:3]


def test_ex10_interleaved_groups_feedback_fits_a_task_without_repeat():
    """ex10 task 3 has no repeat/repeat_interleave call: its feedback talks about the groups."""
    item = next(it for it in ITEMS if it.id == "ex10_kv_groups_kept")
    (m,) = [m for m in item.mistakes if m.name == "interleaved groups"]
    cases = item.cases(0)
    r = judge(
        item,
        cases,
        {"status": "ok", "outputs": [as_arrays(m.variant(*to_framework(item, c))) for c in cases]},
    )
    assert not r.passed and "h % G" in r.message and "h // (H // G)" in r.message
    assert "repeat" not in r.message
