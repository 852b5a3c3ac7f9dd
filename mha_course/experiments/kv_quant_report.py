"""Chapter 16's evidence, read back: the tables of ``results/ch16_kv_quant.json`` and the bytes
each quantization scheme stores, so that the lecture's evidence cells hold only the claim, the
measurement and its assertion (issue 32: bookkeeping moved into the experiment modules).

``python -m mha_course.experiments.kv_quant`` writes the file; :func:`load` reads it back
(schema checked), :func:`across_models` picks one paired difference per model, and the three
``*_table`` functions return the text the lecture prints. Bytes are per token, key/value head and
layer, for one key and one value vector: the codes plus fp16 scales and zero-points
(:func:`mha_course.caches.quant_schemes.scheme_bytes_per_token`).
"""

from __future__ import annotations

from pathlib import Path

from mha_course.caches.quant_schemes import scheme_bytes_per_token
from mha_course.experiments.kv_quant import DEFAULT_OUT, SCHEMA
from mha_course.experiments.results_file import read_results

WINDOW = 64  # a validation window: the positions one per-channel scale covers in `int4 K channel`
# scheme: (bits, scales per token of a key as a function of (head_dim, window, group), of a value).
# Symmetric per token: 1 scale; asymmetric: a scale and a zero-point (2); per channel over the
# window: head_dim / window; per channel in groups of g tokens, asymmetric: 2 · head_dim / g; FP8
# with one scale per tensor or head: about 0. KIVI's rows leave out its residual (the long-context
# limit); `read_bytes` counts it.
LAYOUT = {
    "int8 token": (8, lambda D, S, g: 1, 1),
    "fp8 tensor": (8, lambda D, S, g: 0, 0),
    "fp8 head": (8, lambda D, S, g: 0, 0),
    "int4 token": (4, lambda D, S, g: 1, 1),
    "int4 K channel": (4, lambda D, S, g: D / S, 1),
    "int4 asym token": (4, lambda D, S, g: 2, 2),
    "int4 asym K channel/16": (4, lambda D, S, g: 2 * D / g, 2),
    "KIVI int4": (4, lambda D, S, g: 2 * D / g, 2),
    "KIVI int2": (2, lambda D, S, g: 2 * D / g, 2),
    "int4 token +residual": (4, lambda D, S, g: 1, 1),
    "int2 asym K token +residual": (2, lambda D, S, g: 2, 2),
    "int2 asym K channel/16": (2, lambda D, S, g: 2 * D / g, 2),
}
TABLE = tuple(LAYOUT)[:9]  # the schemes of the main table, in its order
# Like with like: the same 16-token full-precision residual, then KIVI's 2-bit quantizers without it.
RESIDUAL = ("int4 token +residual", "KIVI int2", "int2 asym K token +residual")
NO_RESIDUAL = "int2 asym K channel/16"


def load(path: str | Path = DEFAULT_OUT) -> dict:
    """``results/ch16_kv_quant.json`` (or ``path``); a ValueError when its schema is not kv_quant's."""
    return read_results(path, SCHEMA)


def pm(d: dict) -> str:
    """A paired difference as ``+mean ± standard error``."""
    return f"{d['mean']:+.4f} ± {d['se']:.4f}"


def across_models(result: dict, name: str) -> list[dict]:
    """The paired difference ``name`` on each model, in the file's order: a contrast between two
    schemes (``"a - b"``) or a scheme's loss above the float cache (``"int4 token"``)."""
    out = []
    for r in result["models"].values():
        found = r["contrasts"].get(name, r["minus_float"].get(name))
        if found is None:
            known = sorted(r["contrasts"]) + sorted(r["minus_float"])
            raise ValueError(
                f"name: expected a scheme or contrast of the file, one of {known}; got {name!r}"
            )
        out.append(found)
    return out


def scheme_bytes(scheme: str, head_dim: int, *, window: int = WINDOW, group: int = 16) -> float:
    """Bytes of one key and one value vector of one head in ``scheme`` (residual not counted)."""
    if scheme not in LAYOUT:
        raise ValueError(f"scheme: expected one of {list(LAYOUT)}; got {scheme!r}")
    bits, key_scales, value_scales = LAYOUT[scheme]
    key = scheme_bytes_per_token(head_dim, bits, key_scales(head_dim, window, group))
    return key + scheme_bytes_per_token(head_dim, bits, value_scales)


def read_bytes(
    scheme: str, head_dim: int, share_k: float, share_v: float, group: int = 16
) -> float:
    """Mean bytes per token and head a query reads when a share ``share_k`` of its keys and
    ``share_v`` of its values are held in fp16 (the residual) and the rest in ``scheme``."""
    if not (0 <= share_k <= 1 and 0 <= share_v <= 1):
        raise ValueError(f"share_k, share_v: expected shares in [0, 1]; got {share_k}, {share_v}")
    bits, key_scales, value_scales = LAYOUT[scheme]
    key = scheme_bytes_per_token(head_dim, bits, key_scales(head_dim, WINDOW, group))
    value = scheme_bytes_per_token(head_dim, bits, value_scales)
    fp16 = 2 * head_dim
    return share_k * fp16 + (1 - share_k) * key + share_v * fp16 + (1 - share_v) * value


def stamp_line(result: dict) -> str:
    """Where and when the file was written, on how much text, in how long."""
    return (
        f"stamp: {result['stamp']['date_utc'][:10]} | torch {result['stamp']['torch']} | "
        f"{result['val_windows']} validation windows of 64 characters; "
        f"{result['wall_time_s'] / 60:.1f} min wall; loss above the float cache, nats/char"
    )


def axis_table(result: dict) -> str:
    """Section 1b: int4 keys per token against per channel, and the keys' channel spread."""
    lines = []
    for name, r in result["models"].items():
        d, c = r["minus_float"], r["contrasts"]
        axis, asym = c["int4 K channel - int4 token"], c["int4 asym K channel/16 - int4 asym token"]
        lines += [
            f"{name}: float {r['loss']['float']:.4f} | int4 keys per token {pm(d['int4 token'])} | "
            f"per channel {pm(d['int4 K channel'])} | channel - token {pm(axis)} {axis['ci95']}",
            f"    asymmetric, keys per channel in groups of 16 - per token: {pm(asym)} {asym['ci95']}",
            "    keys' largest channel / median channel (range within a window), per layer: "
            f"{r['key_channel_spread']}",
        ]
    return "\n".join(lines)


def _row(first: str, result: dict, name: str | None = None) -> str:
    """``first``, then one column per model: its name (a header) or the difference ``name``."""
    cells = (
        [f"{n[5:8]:^16s}" for n in result["models"]]
        if name is None
        else [pm(x) for x in across_models(result, name)]
    )
    return f"{first}   " + "   ".join(cells)


def scheme_table(result: dict) -> str:
    """Section 1c: every scheme's loss above the float cache per model, with its bytes at D = 32 and 128."""
    g = result["group"]
    lines = [
        _row(f"{'scheme':24s} {'bytes D=32':>10s} {'D=128':>6s}", result),
        f"{'fp16 (reference)':24s} {4 * 32:10d} {4 * 128:6d}",
    ]
    for s in TABLE:
        b32, b128 = scheme_bytes(s, 32, group=g), scheme_bytes(s, 128, group=g)
        lines.append(_row(f"{s:24s} {b32:10.0f} {b128:6.0f}", result, s))
    lines.append(
        f"scales of one key per channel: groups of 16 at D = 32 {2 * 2 * 32 / 16:.0f} bytes on "
        f"{32 // 2} of int4 codes; groups of 32 at D = 128 {2 * 2 * 128 / 32:.0f} on {128 // 2}"
    )
    return "\n".join(lines)


def residual_table(result: dict, share_k: float, share_v: float) -> str:
    """Like with like: the schemes given KIVI's residual (bytes a query reads at D = 32, residual
    counted), KIVI's 2-bit quantizers without it, and the two paired contrasts of KIVI int2."""
    g = result["group"]
    lines = [_row(f"{'scheme (D = 32, residual 16)':36s} {'bytes read':>10s}", result)]
    for s in RESIDUAL:
        lines.append(_row(f"{s:36s} {read_bytes(s, 32, share_k, share_v, g):10.1f}", result, s))
    no_res = scheme_bytes(NO_RESIDUAL, 32, group=g)
    lines.append(_row(f"{NO_RESIDUAL + ' (no residual)':36s} {no_res:10.1f}", result, NO_RESIDUAL))
    for c in ("KIVI int2 - int4 token +residual", "KIVI int2 - int2 asym K token +residual"):
        lines.append(
            f"{c:40s} " + "  ".join(f"{pm(x)} {x['ci95']}" for x in across_models(result, c))
        )
    return "\n".join(lines)
