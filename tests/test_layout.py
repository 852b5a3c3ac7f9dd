"""The house by concept (CONTRIBUTING.md, "Where things live"): folders named as the course map
names its ideas, no import circle, nothing importing up a layer, the engine apart from the course,
and every module that moved still importable from its old path with a warning naming the new one."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

import mha_course

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top: a folder may import its own floor and the floors below, never one above.
LAYERS = [
    # the engine; the package's face (device.py: the device and a call's peak memory, which the
    # kernels measure); benchmark's stamps, which import nothing of the course and serve the GPT's
    # checkpoints
    {"mha_grader", "__init__", "_checks", "device", "benchmark.stamp"},
    {"ops"},  # attention as functions, masks, positions
    {"caches", "kernels"},  # one Cache interface; tiled, FlashAttention, Triton, ring
    {"attention"},  # modules over ops, caches and kernels; the registry of attention functions
    {"benchmark", "analysis", "models", "paged", "families", "gpt"},
    {"experiments"},
    {"grading"},  # the course's grading policy (the engine below it)
    {"learner", "authoring"},
    {"commands", "cli"},
]
FACE = {"__init__.py", "cli.py", "_checks.py", "device.py"}


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("mha_course", "mha_grader"):
        for p in (ROOT / top).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports() -> dict[str, set[str]]:
    """Module -> the modules of the two packages it imports (at any depth of its code)."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for m, p in mods.items():
        out = set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out |= {resolve(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, (
                    f"{m}: relative import (write `from mha_course.x import ...`)"
                )
                out |= {resolve(f"{node.module}.{a.name}") for a in node.names}
        graph[m] = out - {None, m}
    return graph


def _floor(module: str) -> int:
    parts = module.split(".")
    group = (
        "mha_grader" if parts[0] == "mha_grader" else (parts[1] if len(parts) > 1 else "__init__")
    )
    own = ".".join(parts[1:3])  # a module given a floor of its own (benchmark.stamp)
    found = [i for i, layer in enumerate(LAYERS) if own in layer] or [
        i for i, layer in enumerate(LAYERS) if group in layer
    ]
    assert found, f"{module}: folder {group!r} is on no floor of LAYERS (add it where it belongs)"
    return found[0]


def test_the_package_face_is_flat_and_everything_else_lives_in_a_concept_folder():
    flat = {p.name for p in (ROOT / "mha_course").glob("*.py")}
    assert flat == FACE, f"flat modules besides the face: {sorted(flat - FACE)}"


def test_the_engine_imports_nothing_of_the_course():
    graph = _imports()
    reach = {
        (m, t)
        for m, ts in graph.items()
        if m.startswith("mha_grader")
        for t in ts
        if t.startswith("mha_course")
    }
    assert not reach, sorted(reach)


def test_no_import_runs_up_a_layer():
    up = [
        (m, t)
        for m, ts in _imports().items()
        for t in ts
        if _floor(t) > _floor(m) and t != "mha_course"
    ]  # the face resolves lazily, by name
    assert not up, up


def test_no_import_circle():
    graph = _imports()
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    # a package's __init__ importing its own submodules is not a circle of concepts
    circles = [c for c in circles if not all(m.startswith(c[0]) for m in c)]
    assert not circles, circles


@pytest.mark.parametrize("old", sorted(mha_course._MOVED))
def test_a_moved_module_imports_from_its_old_path_with_a_warning_naming_the_new(old):
    new = f"mha_course.{mha_course._MOVED[old]}"
    assert (ROOT / (new.replace(".", "/") + ".py")).is_file(), new
    with pytest.warns(FutureWarning, match=re.escape(f"mha_course.{old} moved to {new}")):
        module = importlib.import_module(f"mha_course.{old}")
    assert module is importlib.import_module(new)


# Modules split by concept: the public names each had before its split (they now live beside it).
SPLIT = {
    "mha_course.attention.mha": "IMPLS MultiHeadAttention merge_heads split_heads",
    "mha_course.authoring.release": (
        "BEGIN END HIDDEN_BEGIN HIDDEN_END HINTS_FILE MISTAKES_FILE NBGRADER_CONFIG RUN_ON "
        "CONVENTIONS CONVENTIONS_ID Task conventions_cell exercise_from_solution hints_table "
        "hints_text levels mistakes_page nbgrader_source release release_nbgrader stub_source "
        "task_outside tasks test_cell test_cell_source"
    ),
    # the engine (and the private names that other modules or tests import from it)
    "mha_grader.classroom": (
        "COLLECTION_HEADER MergeRefused RESERVE check_complete check_consistent "
        "collection_counts grade_class merge resource_control students write_collection"
    ),
    "mha_grader.compare": (
        "CHILD_STATUSES CRASHED DISK ERROR FORBIDDEN INVALID_NOTEBOOK INVALID_RESULT ItemResult "
        "MEMORY MISSING_FUNCTION MISSING_NOTEBOOK NON_FINITE NOT_COMPILED NOT_IMPLEMENTED "
        "PARENT_STATUSES PASSED PREDICTION_SEP REJECTED TIMEOUT WRONG_DTYPE WRONG_SHAPE "
        "WRONG_TYPE WRONG_VALUES as_arrays compare_output describe_case dtype_rule exact_answer "
        "judge mistake_text output_label reference_dtypes to_framework values_differ _close"
    ),
    "mha_grader.runner": "encode_cases grade_notebook grade_submission static_forbidden",
    "mha_grader.sandbox.cgroup": (
        "Bounds CPU ENV_VAR Group MEMORY MOUNT PERIOD_US PREFIX PROCESSES SLACK_PIDS V1 budget fit "
        "message problem status student sweep_stale"
    ),
    "mha_grader.sandbox.child": (
        "ALIASES CONFINE_FAILED DISK_FULL_FLAG MAX_ELEMENTS PRELOADABLE SEALED Tripwires WrongType "
        "main _resolve _run_item _to_array"
    ),
    "mha_grader.sandbox.isolation": (
        "ENV_VAR HOW_TO MODES SANDBOX_UID SHARED_DIRS UIDS UID_BASE UidPool become bwrap_argv "
        "bwrap_problem check_readable_by_user choose interpreter kill_user remove_files_of "
        "remove_ipc remove_leftovers site_packages user_problem user_runtime_problem _traversable"
    ),
    "mha_grader.sandbox.launch": (
        "CPU_BOUND DISK_FULL Limits OUT_OF_MEMORY TAMPERED TOO_MANY_PROCESSES run_child stager "
        "unseal _limit_argv _rlimits"
    ),
    "mha_course.grading.child.drivers": (
        "ABLATION_VOCAB ablation_models assemble_ring block_shapes course_gpt drive_ablation "
        "drive_block drive_dq_kernel drive_fix drive_forward_kernel drive_generate drive_head_grads "
        "drive_model drive_ring drive_serve drive_timer drive_train from_wire gpt_config gpt_shapes "
        "load_state seeded_state to_wire"
    ),
    # with the helpers the tests read (test_item_kinds)
    "mha_course.grading.chapters.ch07": (
        "ITEMS NOTEBOOK GQA_PARAMS_H GQA_PARAMS_KV_BIAS GQA_PARAMS_NO_W_O HEADS_NOT_MERGED "
        "REPEAT_ON_SEQUENCE _ELEMENT_DTYPES _gqa_params"
    ),
    # with the helpers the tests read (test_channel)
    "mha_course.grading.chapters.ch08": (
        "ITEMS NOTEBOOK FIRST_CALL_EXTRA_MS HOST_CLOCK IN_SECONDS NO_WARMUP ONE_PAIR WARMUP_TIMED "
        "serve_device _timer_cases _timer_reference"
    ),
    # and, where Triton is installed, the kernels (_fwd_kernel, _bwd_dq_kernel: notebook 17, ex17's
    # gallery), now triton_kernels'
    "mha_course.kernels.triton_flash": (
        "INSTALL_HINT TritonFlashAttention backward_blocks interpreted launch_forward tl triton "
        "triton_available triton_backward triton_flash_attention triton_forward"
    ),
    "mha_course.families.convert": "FAMILIES config_from_hf from_hf state_from_hf",
    "build_site": (  # tools/build_site.py
        "EXTERNAL GUIDES HEADING HREF MATHJAX_CONFIG NAV_STYLE REPOSITORY_LINK ROOT SECTIONS "
        "SITE_TEMPLATE STYLE TAG build course_files exercise_index exporter first_heading "
        "head_scripts index_page main nav_bar page_contents render_guide render_notebook "
        "rewrite_links sidebar title_of"
    ),
}


@pytest.mark.parametrize("module", sorted(SPLIT))
def test_a_split_module_still_offers_the_public_names_it_had(module, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # tools/ is not a package (build_site)
    m = importlib.import_module(module)
    assert [n for n in SPLIT[module].split() if not hasattr(m, n)] == []


def test_a_saved_notebook_line_with_an_old_path_still_runs(monkeypatch):
    for old in ("mha_course.window", "mha_course.sdpa"):  # as in a fresh kernel
        monkeypatch.delitem(sys.modules, old, raising=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        exec(
            "from mha_course.window import SlidingWindowCache\nimport mha_course.sdpa as s",
            ns := {},
        )
    assert ns["SlidingWindowCache"] is mha_course.SlidingWindowCache
    assert ns["s"].scaled_dot_product_attention is mha_course.scaled_dot_product_attention
    assert any("mha_course.caches.window" in str(w.message) for w in seen)


def test_an_unknown_module_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mha_course.no_such_module")


def test_every_forbidden_name_resolves_to_its_defining_module():
    """Forbidden names are dotted paths to the DEFINING module: after a move each must still name
    a def or class (a stale one would forbid nothing)."""
    from mha_grader.registry import all_items
    from mha_grader.stage import check_forbidden, locate

    names = sorted({f for it in all_items() for f in it.forbidden if f.startswith("mha_course.")})
    assert len(names) > 10
    check_forbidden(names)
    for name in names:
        file, _node = locate(name)
        assert file.is_file(), name


def test_concept_subpackages_load_their_modules_on_first_use():
    import mha_course as m

    assert m.ops.masks.causal_mask is m.causal_mask
    assert m.caches.window.SlidingWindowCache is m.SlidingWindowCache
    with pytest.raises(AttributeError, match="no_such"):
        _ = m.caches.no_such
