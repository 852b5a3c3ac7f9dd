"""The learner's first steps, in the Lab exactly as ``make lab`` starts it (tools/lab.py):
the Lab's address -> the start page -> a click on an exercise link -> the exercise opens -> its
check runs, in the notebook (the "Check your work" cell) and in a Lab terminal (the command the notebook prints).

Before tools/lab.py, ``make lab`` made ``notebooks/`` the Lab's root: the exercise links on the
start page answered 404 and ``mha-course`` was not on the terminal's PATH. Selected with
``pytest -m browser`` (``-k learner_path`` for this test alone). A screenshot of the last state
goes to test-artifacts/screenshots/learner_path.png.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from .lab import LabServer, launch_chromium
from .test_jupyterlab import SCREENSHOTS, _browser_available, _menu

pytestmark = pytest.mark.browser

START = "00_start_here.ipynb"
EXERCISE = "ex01_dot_product_attention.ipynb"
CHECK_COMMAND = (
    f"mha-course check exercises/{EXERCISE}"  # as the exercise's "Check your work" prints it
)
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
LAST_OUTPUT = f"{PANEL} .jp-CodeCell:last-of-type .jp-OutputArea"
TERMINAL = ".jp-Terminal:not(.lm-mod-hidden)"


def _text_matches(page, selector: str, pattern: str, timeout: float = 120_000) -> str:
    """Wait until the element's text matches ``pattern`` (a JS regex); return the text."""
    page.wait_for_function(
        "([sel, pat]) => new RegExp(pat).test(document.querySelector(sel)?.innerText || '')",
        arg=[selector, pattern],
        timeout=timeout,
    )
    return page.locator(selector).first.inner_text()


def _walk(page, lab: LabServer) -> None:
    # The Lab's own address (`/`, what its printed address leads to: tools/lab.py's default_url),
    # not a hand-made one: it must open the start page (it opened the Launcher before).
    page.goto(f"{lab.url}/?token={lab.token}")
    page.wait_for_function(
        "name => [...document.querySelectorAll('.lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel')]"
        ".some(t => t.textContent === name)",
        arg=START,
        timeout=120_000,
    )
    link = page.locator(f'{PANEL} .jp-MarkdownOutput a[href*="{EXERCISE}"]').first
    link.wait_for(timeout=120_000)
    link.click()  # the exercise link in the start page's course map
    page.wait_for_function(
        "name => [...document.querySelectorAll('.lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel')]"
        ".some(t => t.textContent === name)",
        arg=EXERCISE,
        timeout=60_000,
    )
    page.wait_for_selector(
        f'{PANEL} .jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=120_000
    )

    # The "Check your work" cell (the notebook's last), run as a learner would: click it, Run menu.
    page.locator(f"{PANEL} .jp-CodeCell:last-of-type .jp-InputArea-editor").click()
    _menu(page, "Run", "notebook:run-cell")  # Run > Run Selected Cell and Do not Advance
    out = _text_matches(page, LAST_OUTPUT, r"score: \d|Error")
    assert "ex01_softmax" in out and "score: 0/" in out, out

    # The printed command, typed into a new Lab terminal (File > New > Terminal).
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile("^File$")).click()
    page.locator('.lm-Menu-item[data-type="submenu"]', has_text="New").first.hover()
    page.locator('.lm-Menu-item[data-command="terminal:create-new"]').click()
    page.locator(TERMINAL).wait_for(timeout=60_000)
    page.wait_for_timeout(3000)  # the shell's prompt
    page.locator(TERMINAL).click()
    page.keyboard.type(CHECK_COMMAND + "\n", delay=5)
    text = _text_matches(
        page, f"{TERMINAL} .xterm-accessibility-tree", r"score: \d|not found|No such file"
    )
    assert "score: 0/" in text and "ex01_softmax" in text, text


def test_start_page_to_exercise_to_check() -> None:
    _browser_available()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="mha-learner-") as tmp:
        work = Path(tmp)
        lab = LabServer(work)
        try:
            lab.wait_ready()
            # The Lab's root is the course: exercises/ beside notebooks/ (it was notebooks/ itself).
            top = {entry["name"] for entry in lab.api("/api/contents")["content"]}
            assert {"exercises", "notebooks"} <= top, top
            # The exercise prints the command this test types into the terminal.
            assert CHECK_COMMAND in (lab.root / "exercises" / EXERCISE).read_text(encoding="utf-8")
            with sync_playwright() as pw:
                context = launch_chromium(pw, work / "chromium-profile")
                page = context.pages[0] if context.pages else context.new_page()
                try:
                    _walk(page, lab)
                finally:
                    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(SCREENSHOTS / "learner_path.png"))
                    context.close()
        finally:
            lab.stop()
