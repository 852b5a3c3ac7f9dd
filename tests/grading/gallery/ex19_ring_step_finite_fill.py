"""ex19: future keys filled with -1e9 instead of -inf: an empty block's state is then the mean of
its values with lse near -1e9, not the empty state (out 0, lse -inf). The final answer survives;
the states the ring checks do not (named by the check's own predicate, no variant)."""

from gallery_edits import edited

NOTEBOOK = "ex19"
REPLACE = {
    "ex19_ring_step": edited(
        "ex19",
        "ex19_ring_step",
        [('q_pos[:, None], float("-inf"))', "q_pos[:, None], -1e9)")],
    )
}
EXPECT = {"ex19_ring_step": ("wrong values", "a running state wrong")}
