"""ex02: a float (additive) mask read as allow/block (0 allowed, anything else blocked) instead
of being added to the scores: right for 0 / -inf masks, wrong for a bias such as ALiBi's."""

from gallery_edits import edited

NOTEBOOK = "ex02"
REPLACE = {
    "ex02_attention": edited(
        "ex02",
        "ex02_attention",
        [
            (
                "            scores = scores + attn_mask\n",
                "            scores = scores.masked_fill(attn_mask != 0, float('-inf'))\n",
            )
        ],
    )
}
EXPECT = {"ex02_attention": ("wrong values", "additive mask read as allow/block")}
