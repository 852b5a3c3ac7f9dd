"""Chapter 8: the results file — one JSON schema, checked when written and when read.

A results file is only useful if every number in it can be traced to a machine, a software
stack, a dtype and a shape; :func:`validate_results` refuses one that cannot.
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "mha-course-bench/1"
STAMP_KEYS = (
    "device_type",
    "device_name",
    "cpu_model",
    "threads",
    "torch",
    "cuda",
    "cudnn",
    "numpy",
    "date_utc",
)
SECTIONS = ("comparison", "prefill", "decode", "sweep")
STATUSES = ("ok", "oom", "unsupported", "error", "skipped")
GPU_ONLY_KEYS = ("pct_of_peak", "gb_per_s")


def validate_results(results: dict) -> None:
    """Raise ``ValueError`` naming the first thing that makes ``results`` untraceable."""
    if not isinstance(results, dict) or results.get("schema") != SCHEMA:
        got = results.get("schema") if isinstance(results, dict) else type(results).__name__
        raise ValueError(f"results: expected schema {SCHEMA!r}, got {got!r}")
    stamp = results.get("stamp", {})
    missing = [k for k in STAMP_KEYS if k not in stamp]
    if missing:
        raise ValueError(f"results['stamp']: missing {missing}")
    on_gpu = stamp["device_type"] == "cuda"
    if not on_gpu and not results.get("banner"):
        raise ValueError("results['banner']: CPU results must carry the CPU-fallback banner")
    for section in SECTIONS:
        rows = results.get(section, {}).get("rows")
        if rows is None:
            raise ValueError(f"results[{section!r}]['rows']: missing")
        for i, row in enumerate(rows):
            where = f"results[{section!r}]['rows'][{i}]"
            if row.get("status") not in STATUSES:
                raise ValueError(
                    f"{where}['status']: expected one of {STATUSES}, got {row.get('status')!r}"
                )
            if "variant" not in row or "dtype" not in row:
                raise ValueError(f"{where}: every row names its 'variant' and 'dtype'")
            if row["status"] == "ok" and not {"ms_median", "ms_iqr", "n_samples"} <= row.keys():
                raise ValueError(f"{where}: an 'ok' row needs ms_median, ms_iqr and n_samples")
            if row["status"] != "ok" and "reason" not in row:
                raise ValueError(f"{where}: a {row['status']!r} row needs a 'reason'")
            if not on_gpu and any(row.get(k) is not None for k in GPU_ONLY_KEYS):
                raise ValueError(f"{where}: CPU results report GFLOP/s only, not {GPU_ONLY_KEYS}")
    if "problem" not in results["comparison"]:
        raise ValueError("results['comparison']['problem']: missing (the shapes and dtype)")


def write_results(results: dict, path: str | Path) -> Path:
    """Validate, then write ``results`` as indented JSON (parent folders created)."""
    validate_results(results)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    return path


def load_results(path: str | Path) -> dict:
    """Read and validate a results file."""
    results = json.loads(Path(path).read_text())
    validate_results(results)
    return results


def committed_results(folder: str | Path, device_type: str = "cuda") -> list[tuple[Path, dict]]:
    """Every valid results file for ``device_type`` in ``folder`` (newest date first).

    Files that do not validate are skipped, never half-read: the notebook shows only numbers
    whose origin is stamped.
    """
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            results = load_results(path)
        except (ValueError, OSError, json.JSONDecodeError):
            continue
        if results["stamp"]["device_type"] == device_type:
            found.append((path, results))
    return sorted(found, key=lambda pr: pr[1]["stamp"]["date_utc"], reverse=True)
