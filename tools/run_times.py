"""Measured notebook run times, kept in tools/notebook_run_times.json with what they were measured
under. tools/execute.py records a lecture's; tools/chapter_times.py adds it to the time the chapter
states (each imports this file, not the other: no circle)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

RUN_TIMES = Path(__file__).with_name("notebook_run_times.json")


def load_run_times() -> dict[str, dict]:
    return json.loads(RUN_TIMES.read_text()) if RUN_TIMES.is_file() else {}


def record_run_time(path: Path, seconds: float) -> None:
    """Keep a measured wall time with what it was measured under (load average, cores, threads)."""
    run_times = load_run_times()
    run_times[path.name] = {
        "seconds": round(seconds, 1),
        "load_1min": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
    }
    RUN_TIMES.write_text(json.dumps(dict(sorted(run_times.items())), indent=1) + "\n")
