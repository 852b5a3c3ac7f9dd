"""Open JupyterLab on the course, the one way the README starts it (``make lab`` runs this).

    python tools/lab.py [JUPYTER-LAB OPTIONS...]      # e.g. --no-browser --port=8890

- The Lab's root is the repository root (not ``notebooks/``), so the file browser shows
  ``exercises/`` next to the lectures and the start page's links to ``../exercises/`` open.
- It opens ``notebooks/00_start_here.ipynb``, and the address it prints (the one to paste when no
  browser opens: a remote machine, a container) is that page's, not ``/lab``'s, which would show
  only the Launcher.
- The folder of this Python (the venv's ``bin/``, ``Scripts\\`` on Windows) goes first on the
  ``PATH`` of the Lab, so its terminals and ``!``-lines in notebooks find ``mha-course`` without an
  activated environment; terminals run a plain (non-login) shell, which keeps that ``PATH``
  (a login shell reads /etc/profile, which on Debian resets it).

The browser test (tests/browser/lab.py) starts the Lab with ``command()`` and ``environment()``
from here, so what it tests is what ``make lab`` runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START = "notebooks/00_start_here.ipynb"


def shell() -> list[str]:
    """The Lab terminal's shell: the learner's own, without ``-l``."""
    if os.name == "nt":
        return ["powershell.exe"]
    return [os.environ.get("SHELL") or "/bin/sh"]


def command(root: Path = ROOT, extra: Sequence[str] = ()) -> list[str]:
    """The ``jupyter lab`` command line, for the course at ``root``."""
    as_root = getattr(os, "geteuid", lambda: 1)() == 0  # containers run as root
    return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}",
            f"--LabApp.default_url=/lab/tree/{START}",  # the printed address and `/` open the start page
            f"--ServerApp.terminado_settings={{'shell_command': {shell()!r}}}",
            *(["--allow-root"] if as_root else []), *extra, str(root / START)]


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with this Python's folder first on PATH."""
    env = dict(os.environ if base is None else base)
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([scripts, *(p for p in env.get("PATH", "").split(os.pathsep) if p)])
    return env


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    print(f"JupyterLab on {ROOT} (lectures in notebooks/, exercises in exercises/). If no browser "
          f"opens, paste the http://127.0.0.1:8888/lab/tree/{START}?token=... address printed below "
          "(it opens the start page).", flush=True)
    try:
        return subprocess.call(command(ROOT, argv), cwd=ROOT, env=environment())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
