"""ex16: a finished request keeps its blocks."""

from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_serve": edited(
        "ex16",
        "ex16_serve",
        [
            ("        for i in finished:\n            release(i)\n", ""),
        ],
    )
}
EXPECT = {"ex16_serve": ("wrong values", "not released when a request finishes")}
