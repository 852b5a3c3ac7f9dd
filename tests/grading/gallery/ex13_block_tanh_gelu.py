"""ex13: GPT-2's tanh approximation of GELU in the MLP (the course's MLP uses the exact GELU).

Found by the newcomer's try: written as GPT-2's ``gelu_new`` it scored "values differ (relative
error under 0.1 %)" with no name. The SmallGPT around it is graded with the course's Block and
keeps its marks."""

from gallery_edits import edited

NOTEBOOK = "ex13"
EXPECT = {"ex13_block": ("wrong values", "tanh GELU")}
REPLACE = {
    "ex13_block": edited(
        "ex13",
        "ex13_block",
        [
            (
                "        return self.proj(F.gelu(self.fc(x)))",
                '        return self.proj(F.gelu(self.fc(x), approximate="tanh"))',
            ),
        ],
    )
}
