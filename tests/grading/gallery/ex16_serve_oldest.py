"""ex16: the oldest running request preempted instead of the newest."""

from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_serve": edited(
        "ex16",
        "ex16_serve",
        [
            (
                "victim = running.pop()  # the newest",
                "victim = running.pop(0) if running[0] != i or len(running) == 1 else running.pop(1)",
            ),
        ],
    )
}
EXPECT = {"ex16_serve": ("wrong values", "preempted the oldest")}
