"""tools/check_site.py finds broken links, missing anchors and missing images (and passes a good site)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_site", ROOT / "tools" / "check_site.py")
check_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_site)

PNG = "data:image/png;base64,iVBORw0KGgo="  # any non-empty payload


def _site(tmp_path: Path, index: str, chapter: str) -> Path:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "index.html").write_text(index)
    (tmp_path / "notebooks" / "zz_chapter.html").write_text(chapter)
    return tmp_path


def test_a_good_site_passes(tmp_path):
    site = _site(tmp_path, '<a href="notebooks/zz_chapter.html#Intro">ch</a><a href="https://x.org">x</a>',
                 f'<h1 id="Intro">Intro</h1><img src="{PNG}"><a href="../index.html">up</a><a href="#Intro">¶</a>')
    assert check_site.check(site) == []


def test_broken_links_anchors_and_images_are_reported(tmp_path):
    site = _site(tmp_path, '<a href="notebooks/missing.html">a</a><a href="notebooks/zz_chapter.html#Nope">b</a>',
                 '<img src="data:image/png;base64,"><img src="figure.png"><a href="../exercises/">ex</a>')
    problems = "\n".join(check_site.check(site))
    assert "broken link 'notebooks/missing.html'" in problems
    assert "no anchor #Nope" in problems
    assert "empty or undecodable data: image" in problems
    assert "missing image 'figure.png'" in problems
    assert "broken link '../exercises/'" in problems  # a folder without index.html


def test_percent_encoded_anchors_match_as_in_a_browser(tmp_path):
    site = _site(tmp_path, '<a href="notebooks/zz_chapter.html#A-%E2%80%94-B">a</a>',
                 '<h1 id="A-%E2%80%94-B">A — B</h1>')
    assert check_site.check(site) == []
