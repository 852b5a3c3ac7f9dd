"""ex13: the ablation's bytes from a formula with the H query heads."""

from gallery_edits import edited

NOTEBOOK = "ex13"
REPLACE = {
    "ex13_cache_ablation": edited(
        "ex13",
        "ex13_cache_ablation",
        [
            (
                "    return sum(c.nbytes for c in caches)\n",
                "    c, (B, T) = model.config, ids.shape\n    return 2 * c.n_layer * B * T * c.n_head * c.head_dim * model.wte.weight.element_size()\n",
            ),
        ],
    )
}
EXPECT = {"ex13_cache_ablation": ("wrong values", "query heads counted")}
