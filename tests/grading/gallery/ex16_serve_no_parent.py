"""ex16: each block hashed on its own tokens: equal tokens after another prefix are taken for a hit."""

from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_serve": edited(
        "ex16",
        "ex16_serve",
        [
            (
                "parent = hash((parent, tuple(toks[j * bs:(j + 1) * bs])))  # names the whole prefix",
                "parent = hash(tuple(toks[j * bs:(j + 1) * bs]))",
            ),
        ],
    )
}
EXPECT = {"ex16_serve": ("wrong values", "hashed without its parent")}
