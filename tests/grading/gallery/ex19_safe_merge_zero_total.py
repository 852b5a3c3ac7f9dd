"""ex19: the merge divides by a total of 0 where both partials are empty (0 / 0 is NaN)."""

from gallery_edits import edited

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_safe_merge": edited(
        "ex19",
        "ex19_safe_merge",
        [
            (
                "/ torch.where(total > 0, total, torch.ones_like(total))[..., None]",
                "/ total[..., None]",
            )
        ],
    )
}
EXPECT = {"ex19_safe_merge": ("wrong values", "from a total of 0 (0 / 0)")}
