"""ex16's model (mha_course/grading/child/paged_model.py): decoding through any block table equals dense
decoding, tables that are wrong change the tokens, and bad arguments are refused by name."""

from __future__ import annotations

import pytest
import torch

from mha_course.grading.child.paged_model import PagedToyLM


def _decode(model: PagedToyLM, prompt: list, n_new: int, table: list) -> list:
    """Prefill the prompt, then decode one token at a time, all through ``table``."""
    toks = list(prompt)
    out = [model(toks, table, 0)]
    for _ in range(n_new - 1):
        toks.append(out[-1])
        out.append(model(toks[-1:], table, len(toks) - 1))
    return out


def test_any_table_decodes_like_dense():
    model = PagedToyLM(seed=5, num_blocks=16, block_size=4)
    prompt = torch.randint(
        0, model.vocab_size, (9,), generator=torch.Generator().manual_seed(1)
    ).tolist()
    dense, gap = model.dense_greedy(prompt, 10)
    assert gap > 1e-6 and len(set(dense)) > 1  # a real sequence, not one repeated token
    for table in ([0, 1, 2, 3, 4], [11, 3, 7, 0, 15], [15, 14, 13, 12, 11]):
        assert _decode(model, prompt, 10, table) == dense
    # the request's blocks given to another one in between, then read without recompute: the
    # tokens change (the order of the slots alone would not: the keys carry their positions)
    table = [11, 3, 7, 0, 15]
    assert _decode(model, prompt, 1, table) == dense[:1]
    model(list(range(8)), [3, 7], 0)  # someone else's 8 tokens written into blocks 3 and 7
    assert model(prompt[-1:], table, len(prompt) - 1) != dense[0]


@pytest.mark.parametrize(
    "tokens,table,start,name",
    [
        ([], [0], 0, "tokens"),
        ([300], [0], 0, "tokens"),
        ([1, 2], [0], 3, "table"),
        ([1], [99], 0, "table"),
        ([1], [0], -1, "start"),
        ([1], [0], 1.0, "start"),
    ],
)
def test_bad_arguments_are_refused_by_name(tokens, table, start, name):
    model = PagedToyLM(seed=0, num_blocks=4, block_size=2)
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        model(tokens, table, start)
