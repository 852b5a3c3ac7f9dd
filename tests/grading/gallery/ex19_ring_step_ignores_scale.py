"""ex19: the step ignores its ``scale`` argument and scales by 1/sqrt(D) itself: right for the
course's own rings, wrong for a ring handed another scale."""

from gallery_edits import edited

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_ring_step": edited(
        "ex19",
        "ex19_ring_step",
        [("key.transpose(-2, -1)) * scale", "key.transpose(-2, -1)) / query.shape[-1] ** 0.5")],
    )
}
EXPECT = {"ex19_ring_step": ("wrong values", "scale ignored")}
