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
- The Lab does not ask "Would you like to get notified about official Jupyter news?" in a pop-up
  over the first notebook: ``tools/jupyter-config/`` goes first on ``JUPYTER_CONFIG_PATH``, and its
  ``labconfig/default_setting_overrides.json`` (JupyterLab's documented layer of default settings)
  sets the Notification settings' ``fetchNews`` to Never and ``checkForUpdates`` off. They are
  defaults: Settings → Notifications turns them on again, and nothing outside the course changes.

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
CONFIG = ROOT / "tools" / "jupyter-config"  # the course's Lab defaults (labconfig/)
DEFAULT_PORT = 8888  # jupyter server's; it takes the next free one when 8888 is in use


def shell() -> list[str]:
    """The Lab terminal's shell: the learner's own, without ``-l``."""
    if os.name == "nt":
        return ["powershell.exe"]
    return [os.environ.get("SHELL") or "/bin/sh"]


def command(root: Path = ROOT, extra: Sequence[str] = ()) -> list[str]:
    """The ``jupyter lab`` command line, for the course at ``root``."""
    as_root = getattr(os, "geteuid", lambda: 1)() == 0  # containers run as root
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.default_url=/lab/tree/{START}",  # the printed address and `/` open the start page
        f"--ServerApp.terminado_settings={{'shell_command': {shell()!r}}}",
        *(["--allow-root"] if as_root else []),
        *extra,
        str(root / START),
    ]


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with this Python's folder first on PATH and the
    course's Lab defaults (``CONFIG``) first on ``JUPYTER_CONFIG_PATH``."""
    env = dict(os.environ if base is None else base)
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(
        [scripts, *(p for p in env.get("PATH", "").split(os.pathsep) if p)]
    )
    config = [
        p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p and p != str(CONFIG)
    ]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(CONFIG), *config])
    return env


def port(argv: Sequence[str]) -> int | None:
    """The port given on the command line (``--port=N``, ``--port N``, ``--ServerApp.port=N``...), or None."""
    for i, arg in enumerate(argv):
        for flag in ("--port", "--ServerApp.port", "--NotebookApp.port"):
            value = (
                arg[len(flag) + 1 :]
                if arg.startswith(flag + "=")
                else (argv[i + 1] if arg == flag and i + 1 < len(argv) else None)
            )
            if value is not None and value.isdigit():
                return int(value)
    return None


def banner(argv: Sequence[str]) -> str:
    """The line printed before the Lab starts: where to paste, with the port given (it said 8888 always)."""
    given = port(argv)
    busy = (
        ""
        if given is not None
        else f"; port {DEFAULT_PORT} unless it is in use, then the next free one"
    )
    return (
        f"JupyterLab on {ROOT} (lectures in notebooks/, exercises in exercises/). If no browser "
        f"opens, paste the http://127.0.0.1:{given or DEFAULT_PORT}/lab/tree/{START}?token=... address "
        f"printed below (it opens the start page{busy})."
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    print(banner(argv), flush=True)
    try:
        return subprocess.call(command(ROOT, argv), cwd=ROOT, env=environment())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
