"""ex13: the ablation measures the first layer's cache only."""

from gallery_edits import edited

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_cache_ablation": edited(
        "ex13",
        "ex13_cache_ablation",
        [
            ("    return sum(c.nbytes for c in caches)\n", "    return caches[0].nbytes\n"),
        ],
    )
}
EXPECT = {"ex13_cache_ablation": ("wrong values", "one layer only")}
