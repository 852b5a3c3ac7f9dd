"""ex16: admission ignores the free blocks: the pool runs out and its allocate() raises."""

from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_serve": edited(
        "ex16",
        "ex16_serve",
        [
            ("            if new > len(pool.free):\n                break\n", ""),
        ],
    )
}
EXPECT = {"ex16_serve": ("error", "raised RuntimeError")}
