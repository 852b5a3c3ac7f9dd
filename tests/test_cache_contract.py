"""The contract of :class:`mha_course.caches.base.Cache`, checked on EVERY cache of the course:
decoding token by token and in chunks equals the full forward (float64, against the dense
reference of that cache); ``length`` counts the tokens seen; ``nbytes`` equals chapter 7's formula
for the tokens the cache holds (and the bytes of the tensors it reports holding), ``allocated_bytes``
the formula for what it reserves; a rejected call leaves the cache as it was; ``reset`` empties it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch.testing import assert_close

from mha_course import (
    BlockPool,
    Cache,
    KVCache,
    LatentKVCache,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    PagedKVCache,
    QuantizedKVCache,
    SlidingWindowCache,
    StaticKVCache,
    kv_cache_bytes,
    quantized_cache_bytes,
    sliding_window_mask,
)
from mha_course.caches.base import tensor_bytes

T, E, H, G = 11, 16, 4, 2
D = E // H
W, SINKS, BS = 4, 1, 4  # window and sinks, paged block size
f64 = torch.float64
SCHEDULES = {"token-by-token": [1] * T, "chunks": [3, 1, 4, 2, 1]}


@dataclass
class Case:
    make: Callable[[], Cache]
    B: int
    mla: bool = False
    full: Callable | None = None  # (module, x) -> the dense reference output; None = causal forward
    held_tokens: Callable[[int], int] = lambda n: n
    allocated_tokens: Callable[[int], int] = lambda n: n
    bytes_of: Callable[[int, int], int] = lambda n, B: kv_cache_bytes(1, G, D, n, B, f64)


def _paged() -> Cache:
    cache = PagedKVCache(BlockPool(64, BS, G, D, dtype=f64))
    cache.add("s", budget=T)
    return cache.sequence("s")


def _window_full(m, x):
    return m(x, attn_mask=sliding_window_mask(x.shape[1], window=W, num_sink=SINKS))[0]


def _quant_full(
    m, x
):  # per-token codes do not depend on how the tokens arrive: one call is the reference
    return m(x, kv_cache=QuantizedKVCache(), is_causal=True)[0]


CASES = {
    "KVCache": Case(KVCache, B=2),
    "StaticKVCache": Case(lambda: StaticKVCache(T + 2), B=2, allocated_tokens=lambda n: T + 2),
    "SlidingWindowCache": Case(
        lambda: SlidingWindowCache(W, SINKS),
        B=2,
        full=_window_full,
        held_tokens=lambda n: min(n, W + SINKS),
        allocated_tokens=lambda n: W + SINKS,
    ),
    "QuantizedKVCache": Case(
        QuantizedKVCache,
        B=2,
        full=_quant_full,
        bytes_of=lambda n, B: quantized_cache_bytes(1, G, D, n, B),
    ),
    "LatentKVCache": Case(
        LatentKVCache,
        B=2,
        mla=True,
        bytes_of=lambda n, B: kv_cache_bytes(1, None, None, n, B, f64, latent_dim=6, rope_dim=2),
    ),
    "PagedSequence": Case(_paged, B=1, allocated_tokens=lambda n: -(-n // BS) * BS),
}


def _module(case: Case) -> torch.nn.Module:
    torch.manual_seed(0)
    if case.mla:
        return MultiHeadLatentAttention(E, H, latent_dim=6, rope_dim=2, dtype=f64).eval()
    return MultiHeadAttention(E, H, num_kv_heads=G, rope="half", dtype=f64).eval()


def _step(case: Case, m, x, cache):
    return m(x, kv_cache=cache) if case.mla else m(x, kv_cache=cache, is_causal=True)[0]


def _reference(case: Case, m, x):
    if case.full is not None:
        return case.full(m, x)
    return m(x) if case.mla else m(x, is_causal=True)[0]


def _decode(case, m, x, cache, sizes):
    outs, start = [], 0
    for n in sizes:
        outs.append(_step(case, m, x[:, start : start + n], cache))
        start += n
        assert cache.length == len(cache) == start  # tokens seen
    return torch.cat(outs, dim=1)  # (B, n, E) chunks -> (B, T, E)


def _state(cache: Cache):
    return cache.length, cache.nbytes, cache.allocated_bytes, [t.clone() for t in cache.held()]


def _same_state(a, b):
    assert a[:3] == b[:3]
    assert len(a[3]) == len(b[3]) and all(torch.equal(p, q) for p, q in zip(a[3], b[3]))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", CASES)
def test_decoding_equals_the_full_forward(name, schedule):
    case = CASES[name]
    m, cache = _module(case), case.make()
    assert isinstance(cache, Cache)
    x = torch.randn(case.B, T, E, dtype=f64)
    assert_close(
        _decode(case, m, x, cache, SCHEDULES[schedule]),
        _reference(case, m, x),
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.mark.parametrize("name", CASES)
def test_bytes_count_what_the_cache_holds_and_reserves(name):
    case = CASES[name]
    m, cache = _module(case), case.make()
    assert (cache.length, cache.nbytes, cache.held()) == (0, 0, ())
    x = torch.randn(case.B, T, E, dtype=f64)
    for t in range(T):
        _step(case, m, x[:, t : t + 1], cache)
        held = case.held_tokens(t + 1)
        assert cache.nbytes == case.bytes_of(held, case.B) == tensor_bytes(cache.held())
        assert (
            cache.allocated_bytes
            == case.bytes_of(case.allocated_tokens(t + 1), case.B)
            >= cache.nbytes
        )


def _bad_calls(case: Case, cache: Cache, B: int) -> list[tuple]:
    """Calls each cache must refuse: (args, argument the message names)."""
    k = torch.randn(B, G, 2, D, dtype=f64)
    if case.mla:
        lat, rk = torch.randn(B, 2, 6, dtype=f64), torch.randn(B, 2, 2, dtype=f64)
        return [
            ((lat[..., :5], rk), "latent"),
            ((lat, rk[..., :1]), "rope_key"),
            ((lat[0], rk[0]), "latent"),
            ((lat, rk[:, :1]), "rope_key"),
        ]
    calls = [
        ((k[..., : D - 1], k), "key"),
        ((k, k[..., : D - 1]), "value"),
        ((k[:, :1], k[:, :1]), "key"),
        ((k, k[:, :, :1]), "value"),
        ((k[0], k[0]), "key"),
        ((k, k.float()), "value"),
    ]
    if not isinstance(
        cache, QuantizedKVCache
    ):  # it hands back the input's dtype: float32 keys are fine
        calls.append(((k.float(), k.float()), "key"))
    if isinstance(cache, StaticKVCache):
        calls.append(((torch.randn(B, G, T, D, dtype=f64),) * 2, "key"))  # past max_len
    if name_of(cache) == "PagedSequence":
        calls.append(((torch.randn(B, G, T, D, dtype=f64),) * 2, "key"))  # past its budget
    return calls


def name_of(cache: Cache) -> str:
    return type(cache).__name__


@pytest.mark.parametrize("name", CASES)
def test_a_rejected_call_leaves_the_cache_unchanged(name):
    case = CASES[name]
    m, cache = _module(case), case.make()
    x = torch.randn(case.B, T, E, dtype=f64)
    _step(case, m, x[:, :5], cache)
    before = _state(cache)
    for args, arg in _bad_calls(case, cache, case.B):
        with pytest.raises(ValueError, match=f"^{arg}: "):
            cache.update(*args)
        _same_state(before, _state(cache))
    with pytest.raises(ValueError):  # a bad call of the module (a mask of the wrong shape) too
        if case.mla:
            m(x[:, 5:6, :-1], kv_cache=cache)
        else:
            m(x[:, 5:6], kv_cache=cache, attn_mask=torch.ones(1, 5, dtype=torch.bool))
    _same_state(before, _state(cache))
    rest = torch.cat([_step(case, m, x[:, t : t + 1], cache) for t in range(5, T)], dim=1)
    assert_close(rest, _reference(case, m, x)[:, 5:], rtol=1e-10, atol=1e-10)  # still decodes right


@pytest.mark.parametrize("name", CASES)
def test_reset_empties_and_a_new_sequence_decodes_right(name):
    case = CASES[name]
    m, cache = _module(case), case.make()
    _step(case, m, torch.randn(case.B, 7, E, dtype=f64), cache)
    cache.reset()
    assert (cache.length, len(cache), cache.nbytes, cache.held()) == (0, 0, 0, ())
    x = torch.randn(case.B, T, E, dtype=f64)
    assert_close(
        _decode(case, m, x, cache, SCHEDULES["chunks"]),
        _reference(case, m, x),
        rtol=1e-10,
        atol=1e-10,
    )


# Caches that by design do not equal the plain full forward, each with the test that holds it to
# its own oracle: RenumberedSinkCache renumbers RoPE positions inside the cache (StreamingLLM), so
# once the text outgrows it, it equals tests/test_sink_cache.py's independent renumbering oracle.
# KIVICache keeps recent keys in full precision until a group fills, so a chunk's queries see a
# different mix than token-by-token ones: tests/test_quant_schemes.py checks it against KIVI's definition.
OWN_ORACLE = {
    "RenumberedSinkCache": "tests/test_sink_cache.py",
    "KIVICache": "tests/test_quant_schemes.py",
}


def test_every_cache_of_the_course_is_covered():
    import mha_course

    caches = {
        n
        for n in mha_course.__all__
        if isinstance(getattr(mha_course, n), type)
        and issubclass(getattr(mha_course, n), Cache)
        and getattr(mha_course, n) is not Cache
    }
    assert caches == set(CASES) | set(OWN_ORACLE)
