"""ex19: the block's weights exp(scores) without the row maximum subtracted: overflow on large scores
in float32 (the merge itself is right)."""

from gallery_edits import edited

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_ring_step": edited(
        "ex19",
        "ex19_ring_step",
        [
            (
                "    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # an all-masked row: shift by 0\n",
                "    m = torch.zeros_like(m)\n",
            ),
        ],
    )
}
EXPECT = {"ex19_ring_step": ("wrong values", "without the maximum subtracted")}
