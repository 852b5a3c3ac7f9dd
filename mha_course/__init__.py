"""mha_course: the helper package of the multi-head attention course.

Each chapter leaves its code here; later chapters import it instead of pasting it again.

``import mha_course`` loads nothing else yet: each name below is imported from its module the
first time it is used (``mha_course.KVCache``, ``from mha_course import KVCache``), and so is a
submodule (``mha_course.ops.masks``). A notebook pays only for what it uses - matplotlib only when
it plots - and so does each graded unit, which imports the course afresh (``mha_grader/sandbox/child.py``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__version__ = "0.1.0"

# name -> the module that defines it (one place: ``__all__`` and the lazy lookup both read it).
# Lazy by PEP 562 (a module's ``__getattr__``): a dozen lines, so no dependency for it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["describe_device", "get_device"], "device"),
    **dict.fromkeys(
        ["Cache", "kv_cache_bytes"], "caches.base"
    ),  # the caches' one interface and byte formula
    **dict.fromkeys(["kv_group_of_query_heads", "mean_pool_heads", "mha_to_gqa"], "attention.gqa"),
    "KVCache": "caches.dense",
    **dict.fromkeys(
        ["causal_mask", "combine_masks", "padding_mask", "to_additive", "torch_mha_mask_to_sdpa"],
        "ops.masks",
    ),
    "MultiHeadAttention": "attention.mha",
    **dict.fromkeys(["merge_heads", "split_heads"], "attention.heads"),
    **dict.fromkeys(["LatentKVCache", "MultiHeadLatentAttention"], "attention.mla"),
    **dict.fromkeys(["dot_product_attention", "softmax"], "ops.numpy_attention"),
    **dict.fromkeys(
        ["BlockPool", "slots_needed"], "paged.pool"
    ),  # chapter 16's paged cache, by concept
    **dict.fromkeys(
        ["PagedKVCache", "PagedSequence"], "paged.tables"
    ),  # (all re-exported by mha_course.paged)
    **dict.fromkeys(["continuous_batching", "paged_attention", "paged_forward"], "paged.decode"),
    **dict.fromkeys(["plot_attention", "plot_heads"], "analysis.plotting"),
    **dict.fromkeys(
        ["LearnedPositionEmbedding", "alibi_bias", "alibi_slopes", "sinusoidal_positions"],
        "ops.positions",
    ),
    **dict.fromkeys(
        ["activation_importance", "gradient_importance", "prune_heads", "prune_model_heads"],
        "analysis.pruning",
    ),
    **dict.fromkeys(
        ["QuantizedKVCache", "dequantize", "quantize", "quantized_cache_bytes"], "caches.quantized"
    ),
    **dict.fromkeys(
        ["KIVICache", "fake_quant_asymmetric", "fake_quant_fp8", "scheme_bytes_per_token"],
        "caches.quant_schemes",
    ),
    **dict.fromkeys(
        [
            "apply_rope",
            "convert_rope_layout",
            "rope_angles",
            "rope_frequencies",
            "rope_permutation",
        ],
        "ops.rope",
    ),
    **dict.fromkeys(["repeat_kv", "scaled_dot_product_attention", "stable_softmax"], "ops.sdpa"),
    "SelfAttentionHead": "attention.single_head",
    **dict.fromkeys(
        ["bootstrap_ci", "k_of_n", "loglog_slope", "paired_diff_ci"], "analysis.stats"
    ),  # intervals
    "StaticKVCache": "caches.static",
    "RenumberedSinkCache": "caches.sink",  # chapter 14: StreamingLLM's positions in the cache
    **dict.fromkeys(["online_softmax_update", "tiled_attention"], "kernels.tiled"),
    "TinyCausalLM": "models.tiny_lm",
    **dict.fromkeys(
        ["SlidingWindowCache", "layout_cache_bytes", "receptive_field", "sliding_window_mask"],
        "caches.window",
    ),
    **dict.fromkeys(
        ["GPT", "GPTConfig", "evaluate", "generate", "load_checkpoint"], "gpt"
    ),  # chapter 13
    "hint": "grading.hints",  # the exercises' hints, one level per call
    "progress": "learner.progress",  # every exercise's items and points so far, the next hints
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> object:
    """Import ``name`` (an exported function or class, or a submodule) on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def _lazy_submodules(package: str):
    """A package's ``__getattr__`` that imports its submodules on first use, as this one does
    (``mha_course.ops.masks`` after a bare ``import mha_course``)."""

    def __getattr__(name: str) -> object:
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


# Modules that moved when the package was laid out by concept (old -> new, both under
# ``mha_course.``). A notebook saved before the move still imports them, with a FutureWarning
# that names the new place; ``from mha_course import X`` never changed.
_MOVED: dict[str, str] = {
    "numpy_attention": "ops.numpy_attention",
    "sdpa": "ops.sdpa",
    "masks": "ops.masks",
    "positions": "ops.positions",
    "rope": "ops.rope",
    "flex_masks": "ops.flex_masks",
    "cache": "caches.base",
    "kv_cache": "caches.dense",
    "static_kv_cache": "caches.static",
    "window": "caches.window",
    "sink_cache": "caches.sink",
    "quant_cache": "caches.quantized",
    "quant_schemes": "caches.quant_schemes",
    "cache_attention": "caches.per_head",
    "single_head": "attention.single_head",
    "mha": "attention.mha",
    "gqa": "attention.gqa",
    "mla": "attention.mla",
    "tiled": "kernels.tiled",
    "flash_backward": "kernels.flash_backward",
    "triton_flash": "kernels.triton_flash",
    "triton_dq": "kernels.triton_dq",
    "ring": "kernels.ring",
    "ring_run": "kernels.ring_run",
    "block_pool": "paged.pool",
    "paged_cache": "paged.tables",
    "paged_decode": "paged.decode",
    "tiny_lm": "models.tiny_lm",
    "tiny_transformer": "models.tiny_transformer",
    "position_lm": "models.position_lm",
    "pruning": "analysis.pruning",
    "explorer": "analysis.explorer",
    "stats": "analysis.stats",
    "plotting": "analysis.plotting",
    "tasks": "analysis.tasks",
    "learner_progress": "learner.progress",
    "grading.release": "authoring.release",
    "grading.keep_work": "authoring.keep_work",
    "grading.drivers": "grading.child.drivers",
    "grading.served_model": "grading.child.served_model",
    "grading.served_device": "grading.child.served_device",
    "grading.seeded": "grading.child.seeded",
    "grading.paged_model": "grading.child.paged_model",
    "grading.triton_forward": "grading.oracles.triton_forward",
    "grading.triton_dq_kernel": "grading.oracles.triton_dq_kernel",
    "grading.serving_reference": "grading.oracles.serving_reference",
    "grading.chapters._layout_bug": "grading.oracles.layout_bug",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import mha_course.ops.sdpa`` -> the module ``mha_course.ops.sdpa`` (the same object), with a
    warning naming the new path."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname.partition(".")[2]
        if fullname.startswith(f"{__name__}.") and old in _MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = f"{__name__}.{_MOVED[spec.name.partition('.')[2]]}"
        warnings.warn(
            f"{spec.name} moved to {new}: import it from there (or use `from {__name__} "
            f"import ...` for a public name); the old path will go away",
            FutureWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """Nothing to run: ``create_module`` returned the imported module itself."""


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
