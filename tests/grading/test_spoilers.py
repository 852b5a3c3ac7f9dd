"""Feedback names the symptom, never the fix: the fix is what the hint levels are for (issue 23,
"Spoilers"). Every named mistake's text is checked for the phrasings that gave a fix away."""

from __future__ import annotations

import re

import pytest

from mha_course.grading import all_items

FIX_PHRASES = [
    r"\buse\b",
    r"was needed",
    r"\bneeds? (a|an|to)\b",
    r"\bsum the\b",
    r"\binstead of .* was\b",
    r"(^|[:;—(]\s*)(apply|merge|concatenate|divide|subtract|fill|interleave|call|record|multiply|append|"
    r"return|compare|keep|give|weight|rotate|round|record)\b",
    r"\bthen (apply|multiply|divide|attend)\b",
    r"->.*->",  # a reshape recipe
]


def _texts():
    seen = {}
    for it in all_items():
        for m in it.mistakes:
            seen.setdefault(m.feedback, f"{it.id} / {m.name}")
    return sorted(seen.items(), key=lambda kv: kv[1])


@pytest.mark.parametrize("text,where", _texts(), ids=[w for _, w in _texts()])
def test_a_named_mistake_states_no_fix(text, where):
    for p in FIX_PHRASES:
        m = re.search(p, text, re.IGNORECASE)
        assert m is None, f"{where}: {text!r} gives the fix away ({m.group(0)!r})"


def test_a_mistake_is_named_once():
    """Not "off by one: causal mask off by one: ..." (issue 23)."""
    from mha_grader.compare import mistake_text

    for it in all_items():
        for m in it.mistakes:
            head = ":".join(mistake_text(m).split(":")[:2]).lower()
            assert len(re.findall(rf"\b{re.escape(m.name.lower())}\b", head)) <= 1, (
                f"{it.id}: {mistake_text(m)!r} names {m.name!r} twice"
            )
