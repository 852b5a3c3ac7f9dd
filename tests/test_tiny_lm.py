"""TinyCausalLM: cached decoding equals full recomputation; bad input says what was wrong."""

import pytest
import torch
from torch.testing import assert_close

from mha_course import KVCache, TinyCausalLM
from mha_course.models.tiny_lm import greedy_generate_reference


def _model(seed: int = 0, **kw) -> TinyCausalLM:
    torch.manual_seed(seed)
    return TinyCausalLM(**kw).double().eval()


@pytest.mark.parametrize("num_layers", [1, 3])
def test_chunk_then_tokens_equals_full_forward(num_layers):
    model = _model(num_layers=num_layers)
    ids = torch.randint(0, model.vocab_size, (2, 9))
    full = model(ids)  # (B, T, V)
    caches = model.new_caches()
    parts = [model(ids[:, :4], caches)] + [model(ids[:, t : t + 1], caches) for t in range(4, 9)]
    assert_close(torch.cat(parts, dim=1), full)
    assert [len(c) for c in caches] == [9] * num_layers


def test_future_tokens_do_not_change_earlier_logits():
    model = _model(1)
    ids = torch.randint(0, model.vocab_size, (1, 8))
    changed = ids.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % model.vocab_size
    assert torch.equal(model(ids)[:, :5], model(changed)[:, :5])
    assert not torch.allclose(model(ids)[:, 5:], model(changed)[:, 5:])


def test_cached_greedy_loop_equals_reference():
    model = _model(2)
    prompt = torch.randint(0, model.vocab_size, (3, 4))
    caches, ids = model.new_caches(), prompt
    with torch.no_grad():
        step_input = prompt
        for _ in range(7):
            next_id = model(step_input, caches)[:, -1].argmax(-1, keepdim=True)
            ids, step_input = torch.cat([ids, next_id], dim=1), next_id
    assert torch.equal(ids, greedy_generate_reference(model, prompt, 7))


def test_one_cache_shared_by_layers_is_wrong():
    """The mistake the exercise's feedback names must actually change the result."""
    model = _model(3, num_layers=2)
    ids = torch.randint(0, model.vocab_size, (1, 6))
    shared = KVCache()
    with torch.no_grad():
        wrong = model(ids, [shared, shared])  # layer 2 also attends to layer 1's keys/values
    assert not torch.allclose(wrong, model(ids))


def test_bad_input_names_the_argument():
    model = _model()
    with pytest.raises(ValueError, match=r"ids: expected shape \(B, L\)"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="caches: expected a list of 2 KVCache"):
        model(torch.zeros(1, 3, dtype=torch.long), [KVCache()])
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, model.max_len + 1, dtype=torch.long))
