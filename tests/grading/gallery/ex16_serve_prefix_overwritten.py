"""ex16: a prefill after prefix hits writes its new tokens from position 0, over the shared prefix
blocks (and reads only those). The block accounting is right; only the tokens show it."""

from gallery_edits import edited

NOTEBOOK = "ex16"
REPLACE = {
    "ex16_serve": edited(
        "ex16",
        "ex16_serve",
        [
            (
                "            token = model(tokens[i][start:], table[i], start)",
                "            token = model(tokens[i][start:], table[i], 0)",
            ),
        ],
    )
}
EXPECT = {
    "ex16_serve": (
        "wrong values",
        "tokens differ from dense decoding in requests that share prefix blocks",
    )
}
