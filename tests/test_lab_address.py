"""The address ``make lab`` prints opens the start page.

tools/lab.py tells a learner whose browser does not open (a remote machine, a container, WSL) to
paste the address the Lab prints. That address was ``http://127.0.0.1:8888/lab?token=...``, which
opens JupyterLab's Launcher, not the course: the newcomer landed on an empty Launcher and had to find
``notebooks/00_start_here.ipynb`` in the file browser. This test starts the Lab with tools/lab.py's
command line (no browser, a free port), reads the address it prints, and loads it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
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
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    env.pop("JUPYTER_TOKEN", None)  # the learner's case: a generated token, printed in full
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            lab.command(ROOT, ["--no-browser", f"--port={port}", "--ip=127.0.0.1",
                               "--ServerApp.port_retries=0", "--LabApp.extension_manager=readonly"]),
            cwd=ROOT, env=lab.environment(env), stdout=out, stderr=subprocess.STDOUT)
    try:
        pattern = re.compile(rf"http://127\.0\.0\.1:{port}(/\S*)")
        deadline, printed = time.monotonic() + 120, None
        while printed is None and time.monotonic() < deadline and process.poll() is None:
            printed = pattern.search(log.read_text())
            time.sleep(0.5)
        assert printed, f"no address printed:\n{log.read_text()[-3000:]}"
        url = urllib.parse.urlsplit(printed.group(1))
        assert url.path == f"/lab/tree/{START}", f"the printed address opens {url.path}, not the start page"
        assert "token" in urllib.parse.parse_qs(url.query), printed.group(0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{printed.group(1)}", timeout=30) as page:
            assert page.status == 200 and "JupyterLab" in page.read().decode()
        # `/` (what a learner types after losing the tab) leads there too
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/?{url.query}", timeout=30) as page:
            assert urllib.parse.urlsplit(page.geturl()).path == f"/lab/tree/{START}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
