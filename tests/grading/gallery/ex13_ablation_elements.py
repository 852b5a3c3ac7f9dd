"""ex13: the ablation counts cached numbers, not bytes."""

from gallery_edits import edited

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_cache_ablation": edited(
        "ex13",
        "ex13_cache_ablation",
        [
            (
                "    return sum(c.nbytes for c in caches)\n",
                "    return sum(t.numel() for c in caches for t in c.held())\n",
            ),
        ],
    )
}
EXPECT = {"ex13_cache_ablation": ("wrong values", "elements, not bytes")}
