"""The conventions box: the same markdown cell after the title of every released exercise
(letters, dtypes, masks, and how each exercise stores its weight matrices)."""

from __future__ import annotations

import nbformat

CONVENTIONS_ID = "conventions"
CONVENTIONS = """\
**Conventions** (the same box in every exercise, written by `mha-course release`)

- **Letters.** B batch · L query length · S key/value length · T sequence length where L = S
  (self-attention) · E `embed_dim` · H query heads · G key/value heads · D head size, the query/key
  features (D = E / H) · Dv value features (D unless a task says otherwise) · `...` any leading
  dimensions. Each task's `Shape:` line uses these letters.
- **Dtypes.** A function given floating tensors returns their dtype (float32 in, float32 out;
  float64 in, float64 out). A function given only sizes may return float32 or float64; it is
  compared at the precision it returns. Counts and indices are compared exactly, as any number
  type. Every graded test cell states its item's rule in a `# dtype rule:` line.
- **Masks.** A bool mask is True where a query MAY attend (the convention of torch's SDPA).

**Weights.** How each exercise stores its weight matrices, and so how a projection is written (the
other exercises take no weight matrices):

| exercises | layout | a projection is |
|---|---|---|
| ex03 | the lecture's maths: `W_Q`, `W_K`, `W_V` are (E, D) | `x @ W` |
| ex04 | the lecture's maths: `W_Q`, `W_K`, `W_V`, `W_O` are (E, E) | `x @ W` |
| ex06, ex07, ex15 | `nn.Linear`'s storage (out, in): `W_Q` is (H·D, E), `W_O` is (E, H·D) | `x @ W.T` |
| ex10 | `nn.Linear`'s storage (out, in): `W_Q` is (H·D, E), `W_O` is (E, H·D) | (its tasks slice weights) |
"""


def conventions_cell() -> nbformat.NotebookNode:
    """The conventions box (one source, above): a markdown cell after each exercise's title."""
    cell = nbformat.v4.new_markdown_cell(CONVENTIONS.rstrip("\n"))
    cell.id = CONVENTIONS_ID
    cell.metadata = nbformat.from_dict({"tags": ["conventions"]})
    return cell


def with_conventions(cells: list) -> list:
    """``cells`` with the conventions box after the first (the title)."""
    return [cells[0], conventions_cell(), *cells[1:]] if cells else [conventions_cell()]
