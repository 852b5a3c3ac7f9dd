"""The address ``make lab`` prints opens the start page.

tools/lab.py tells a learner whose browser does not open (a remote machine, a container, WSL) to
paste the address the Lab prints. That address was ``http://127.0.0.1:8888/lab?token=...``, which
opens JupyterLab's Launcher, not the course: the newcomer landed on an empty Launcher and had to find
``notebooks/00_start_here.ipynb`` in the file browser. This test starts the Lab with tools/lab.py's
command line (no browser, a free port), reads the address it prints, and loads it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
START = "notebooks/00_start_here.ipynb"


def _lab_tool():
    spec = importlib.util.spec_from_file_location("mha_lab_tool", ROOT / "tools" / "lab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None, reason="needs jupyterlab")
def test_the_printed_address_is_the_start_page(tmp_path: Path) -> None:
    lab, port = _lab_tool(), _free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    env.pop("JUPYTER_TOKEN", None)  # the learner's case: a generated token, printed in full
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            lab.command(
                ROOT,
                [
                    "--no-browser",
                    f"--port={port}",
                    "--ip=127.0.0.1",
                    "--ServerApp.port_retries=0",
                    "--LabApp.extension_manager=readonly",
                ],
            ),
            cwd=ROOT,
            env=lab.environment(env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        pattern = re.compile(rf"http://127\.0\.0\.1:{port}(/\S*)")
        deadline, printed = time.monotonic() + 120, None
        while printed is None and time.monotonic() < deadline and process.poll() is None:
            printed = pattern.search(log.read_text())
            time.sleep(0.5)
        assert printed, f"no address printed:\n{log.read_text()[-3000:]}"
        url = urllib.parse.urlsplit(printed.group(1))
        assert url.path == f"/lab/tree/{START}", (
            f"the printed address opens {url.path}, not the start page"
        )
        assert "token" in urllib.parse.parse_qs(url.query), printed.group(0)
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}{printed.group(1)}", timeout=30
        ) as page:
            assert page.status == 200 and "JupyterLab" in page.read().decode()
        # `/` (what a learner types after losing the tab) leads there too
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/?{url.query}", timeout=30) as page:
            assert urllib.parse.urlsplit(page.geturl()).path == f"/lab/tree/{START}"
        # no news pop-up over the first notebook: the Lab serves fetchNews = Never (see tools/lab.py)
        settings = f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/apputils-extension:notification?{url.query}"
        with urllib.request.urlopen(settings, timeout=30) as page:
            served = json.loads(page.read().decode())
        defaults = {
            k: v.get("default") for k, v in served["schema"]["properties"].items()
        }  # overrides land here
        assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False, defaults
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_banner_names_the_port_given(monkeypatch, capsys) -> None:
    """tools/lab.py printed "http://127.0.0.1:8888/..." whatever --port was given (issue 32)."""
    lab = _lab_tool()
    monkeypatch.setattr(lab.subprocess, "call", lambda *a, **k: 0)
    for argv, shown in (
        (["--no-browser", "--port=8890"], 8890),
        (["--port", "9001"], 9001),
        (["--ServerApp.port=8765"], 8765),
        ([], 8888),
    ):
        assert lab.main(argv) == 0
        out = capsys.readouterr().out
        assert f"http://127.0.0.1:{shown}/lab/tree/{START}?token=" in out, (argv, out)
        assert ("8888 unless it is in use" in out) == (not argv), out


@pytest.mark.skipif(
    importlib.util.find_spec("jupyterlab_server") is None, reason="needs jupyterlab_server"
)
def test_the_course_lab_does_not_ask_for_news(tmp_path: Path) -> None:
    """The Lab's "Would you like to get notified about official Jupyter news?" pop-up covered the first
    notebook: the course's Lab sets the default of fetchNews to Never, through JupyterLab's
    labconfig/default_setting_overrides.json layer, and leaves the learner's own settings alone."""
    lab = _lab_tool()
    env = lab.environment(dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config")))
    read = (
        "from jupyterlab_server.settings_utils import _get_overrides; import json; "
        f"print(json.dumps(_get_overrides({str(tmp_path / 'none')!r})[0]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", read], env=env, capture_output=True, text=True, check=True
    )
    overrides = json.loads(done.stdout)["@jupyterlab/apputils-extension:notification"]
    assert overrides == {"fetchNews": "false", "checkForUpdates": False}, overrides
    assert lab.environment(env)["JUPYTER_CONFIG_PATH"] == env["JUPYTER_CONFIG_PATH"]  # added once
