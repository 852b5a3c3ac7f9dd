"""ex06: the key padding mask given one new axis instead of two, key_padding_mask[:, None, :]:
(B, S) -> (B, 1, S) broadcasts as (1, B, 1, S), so batch b's padding lands on head b. Right when
B == 1, or when every sequence has the same length."""

from gallery_edits import edited

NOTEBOOK = "ex06"
REPLACE = {
    "ex06_cross_weights": edited(
        "ex06",
        "ex06_cross_weights",
        [("key_padding_mask[:, None, None, :]", "key_padding_mask[:, None, :]")],
    ),
    "ex06_cross_attention": edited(
        "ex06",
        "ex06_cross_attention",
        [("~key_padding_mask[:, None, None, :]", "~key_padding_mask[:, None, :]")],
    ),
}
EXPECT = {
    "ex06_cross_weights": ("wrong values", "padding mask one axis short"),
    "ex06_cross_attention": ("wrong values", "padding mask one axis short"),
}
