"""``reach.allowed``: what a mode-``user`` child may read when the course is a checkout that
HOLDS its own venv (``make``'s layout, and CI's fresh clone). Before, the whole checkout was
hidden and with it the venv's site-packages, so every unit crashed before grading in such a
clone (seen in a fresh clone under /tmp)."""

from __future__ import annotations

from mha_grader.sandbox import reach


def test_a_checkout_holding_its_venv_hides_the_course_but_not_the_venv(tmp_path):
    checkout = tmp_path / "clone"
    site = checkout / ".venv" / "lib" / "python3" / "site-packages"
    for d in (site / "numpy", checkout / "mha_course", checkout / "solutions", checkout / "tests"):
        d.mkdir(parents=True)
    hide = [str(checkout), str(checkout / "mha_course")]
    roots = [str(checkout / ".venv"), str(site)]
    allowed = reach.allowed(roots, hide)
    assert str(checkout / ".venv") in allowed
    for secret in ("mha_course", "solutions", "tests"):
        assert not any(
            a == str(checkout / secret) or a.startswith(str(checkout / secret) + "/")
            for a in allowed
        ), (secret, allowed)
    assert str(checkout) not in allowed


def test_a_hidden_folder_holding_no_root_stays_hidden_whole(tmp_path):
    (tmp_path / "course" / "mha_course").mkdir(parents=True)
    (tmp_path / "venv").mkdir()
    allowed = reach.allowed([str(tmp_path)], [str(tmp_path / "course")])
    assert str(tmp_path / "venv") in allowed and not any("course" in a for a in allowed)
