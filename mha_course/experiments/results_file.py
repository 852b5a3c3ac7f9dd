"""Reading a stamped results file back: its ``schema`` must be the one the reader expects."""

from __future__ import annotations

import json
from pathlib import Path


def read_results(path: str | Path, schema: str) -> dict:
    """The JSON at ``path``; a ValueError naming ``path`` when its ``schema`` is not ``schema``."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != schema:
        raise ValueError(
            f"path: expected a results file with schema {schema!r}, got "
            f"{data.get('schema')!r} in {path}"
        )
    return data
