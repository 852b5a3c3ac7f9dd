"""ex13: the ablation measures the keys' bytes only."""

from gallery_edits import edited

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_cache_ablation": edited(
        "ex13",
        "ex13_cache_ablation",
        [
            (
                "    return sum(c.nbytes for c in caches)\n",
                "    return sum(c.held()[0].numel() * c.held()[0].element_size() for c in caches)\n",
            ),
        ],
    )
}
EXPECT = {"ex13_cache_ablation": ("wrong values", "keys only")}
