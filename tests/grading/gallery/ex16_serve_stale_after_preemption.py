"""ex16: a preempted request resumes without recompute: only its newest token is computed, the
rest read from blocks it got back at admission (whose keys/values belong to someone else, or to
other positions). The block accounting is right; only the tokens show it."""

from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_serve": edited(
        "ex16",
        "ex16_serve",
        [
            (
                "            start = min(len(hits) * bs, len(tokens[i]) - 1)",
                "            start = len(tokens[i]) - 1 if preemptions[i] else min(len(hits) * bs, len(tokens[i]) - 1)",
            ),
        ],
    )
}
EXPECT = {"ex16_serve": ("wrong values", "tokens of preempted requests differ from dense decoding")}
