"""ex01: the raw scores are used as weights."""
NOTEBOOK = "ex01"
REPLACE = {"ex01_attend": '''
def attend(query, keys, values):
    return dot_scores(query, keys) @ values
'''}
EXPECT = {"ex01_attend": ("wrong values", "no softmax")}
