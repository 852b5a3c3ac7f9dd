"""A throwaway JupyterLab server and a headless Chromium that drives it (used by test_jupyterlab.py).

The server serves a temporary copy of ``notebooks/`` and ``exercises/`` (the other top-level folders
are linked next to them, so relative paths such as ``../benchmarks`` still resolve): running cells in
the browser never rewrites the committed notebooks. It is started with ``make lab``'s command line
(tools/lab.py). Chromium is the operating system's package (``apt-get install
chromium``); Playwright only drives it, nothing downloads a browser.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def _load_lab_tool():
    """tools/lab.py, which `make lab` runs (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "mha_lab_tool", Path(__file__).resolve().parents[2] / "tools" / "lab.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROOT = Path(__file__).resolve().parents[2]
start = _load_lab_tool()
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Without the networking flags Chromium keeps calling home, which floods a closed network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# JupyterLab user settings for the test: attach every cell to the DOM (JupyterLab 4 may window
# off-screen cells, which would hide their images from the count and the screenshot) and no
# "news / updates" notification over the notebook; terminals readable (test_learner_path.py).
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # the terminal's text in the DOM (xterm's accessibility tree), where the test can read it
    "@jupyterlab/terminal-extension/plugin.jupyterlab-settings": {"screenReaderMode": True},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


COPIED = ("notebooks", "exercises")  # the folders whose notebooks the browser runs (and may save)


def copy_course(dest: Path) -> Path:
    """dest/notebooks and dest/exercises are real copies; every other top-level entry is a link
    (or a copy)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints")
        )
    for entry in ROOT.iterdir():
        if entry.name in {*COPIED, ".git", ".venv", "test-artifacts"}:
            continue
        try:
            (dest / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        except OSError:  # e.g. Windows without symlink rights
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, dest / entry.name)
    return dest


class LabServer:
    """``jupyter lab`` on a free port with a random token; ``stop()`` ends it and its kernels."""

    def __init__(self, work: Path, extra: dict[str, str] | None = None) -> None:
        self.root = copy_course(work / "course")
        for name, text in (extra or {}).items():  # e.g. the test's own canary notebook
            (self.root / "notebooks" / name).write_text(text, encoding="utf-8")
        settings = work / "settings"
        for name, value in SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(value))
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(
            os.environ,
            JUPYTER_CONFIG_DIR=str(work / "config"),
            JUPYTER_RUNTIME_DIR=str(work / "runtime"),
        )
        log = (
            ROOT / "test-artifacts" / "jupyter-lab.log"
        )  # kept after the run, next to the screenshots
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log.open("w")
        # `make lab`'s command line (tools/lab.py: the course root as the Lab's root, the start
        # page, the venv on PATH), plus what a test needs: its port, token and settings, no browser.
        self.process = subprocess.Popen(
            start.command(
                self.root,
                [
                    "--no-browser",
                    f"--port={self.port}",
                    "--ip=127.0.0.1",
                    f"--IdentityProvider.token={self.token}",
                    f"--LabApp.user_settings_dir={settings}",
                    f"--LabApp.workspaces_dir={work / 'workspaces'}",
                    "--ServerApp.port_retries=0",
                    "--LabApp.extension_manager=readonly",
                ],
            ),  # no PyPI queries from the extension manager
            cwd=self.root,
            env=start.environment(env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with {self.process.returncode}; see {self.log.name}"
                )
            try:
                self.api("/api/status")
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise TimeoutError(
            f"jupyter lab did not answer within {timeout:.0f} s; see {self.log.name}"
        )

    def notebook_url(self, name: str, workspace: str) -> str:
        """One workspace per browser page, reset on every load: each page shows only its own
        notebook (pages sharing a workspace would restore each other's open notebooks)."""
        return (
            f"{self.url}/lab/workspaces/{workspace}/tree/notebooks/{name}?reset&token={self.token}"
        )

    def shutdown_kernels(self, name: str) -> None:
        """Delete the sessions (and so the kernels) of one notebook, to free memory for the next."""
        for session in self.api("/api/sessions"):
            if session.get("path", "").endswith(name):
                self.api(f"/api/sessions/{session['id']}", method="DELETE")

    def log_size(self) -> int:
        """How far the Lab's log has been written (a place to read ``log_text`` from)."""
        self.log.flush()
        return os.path.getsize(self.log.name)

    def log_text(self, start: int) -> str:
        """What the Lab wrote to its log from ``start`` on (for a stalled notebook's diagnosis)."""
        with open(self.log.name, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def launch_chromium(playwright, user_data_dir: Path):
    """A persistent context on a fresh profile folder (Playwright owns ``--user-data-dir``)."""
    return playwright.chromium.launch_persistent_context(
        str(user_data_dir),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1280, "height": 900},
    )
