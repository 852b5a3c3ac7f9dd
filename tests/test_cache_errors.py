"""Bad input to the caches of chapters 5, 7 and 14–16 (their constructors and ``update``/``append``)
raises ``ValueError`` whose message starts with the argument's name and shows the expected shape in
letters (or the allowed values) and what came in. One table; each row is one mistake a learner makes.
(The public functions outside the cache classes are in ``tests/test_errors.py``.)"""

from __future__ import annotations

import pytest
import torch

from mha_course import (
    BlockPool,
    KVCache,
    LatentKVCache,
    MultiHeadLatentAttention,
    PagedKVCache,
    QuantizedKVCache,
    SlidingWindowCache,
    StaticKVCache,
    continuous_batching,
)
from mha_course.caches.quantized import dequantize, pack_int4
from mha_course.paged.pool import slots_needed

f64 = torch.float64


def kv(*shape, dtype=f64):
    return torch.zeros(*shape, dtype=dtype)


def _paged(dtype=f64) -> PagedKVCache:
    cache = PagedKVCache(BlockPool(16, 4, 2, 3, dtype=dtype))
    cache.add("s", budget=8)
    return cache


def _batch(join_step):  # one request of 2 tokens joining at join_step
    module = torch.nn.Module()  # never called: the requests are refused before any step
    return continuous_batching(module, {"r": (join_step, kv(2, 8))}, _paged())


def _filled(cache, *shapes):
    cache.update(*(kv(*s) for s in shapes))
    return cache


# (what goes wrong, the call, the argument named, fragments the message must contain)
ROWS = [
    ("max_len a float", lambda: StaticKVCache(8.0), "max_len", ["positive int", "8.0"]),
    ("max_len zero", lambda: StaticKVCache(0), "max_len", ["positive int", "0"]),
    ("max_len a bool", lambda: StaticKVCache(True), "max_len", ["positive int", "True"]),
    ("window a float", lambda: SlidingWindowCache(4.0), "window", ["positive int", "4.0"]),
    ("negative sinks", lambda: SlidingWindowCache(4, -1), "num_sink", ["int >= 0", "-1"]),
    ("3 bits", lambda: QuantizedKVCache(3), "bits", ["(8, 4)", "3"]),
    (
        "an int scale dtype",
        lambda: QuantizedKVCache(scale_dtype=torch.int8),
        "scale_dtype",
        ["floating-point", "torch.int8"],
    ),
    (
        "a scale dtype by name",
        lambda: QuantizedKVCache(scale_dtype="float16"),
        "scale_dtype",
        ["floating-point", "'float16'"],
    ),
    ("block size zero", lambda: BlockPool(16, 0, 2, 3), "block_size", ["positive int", "0"]),
    ("block size a float", lambda: BlockPool(16, 4.0, 2, 3), "block_size", ["positive int", "4.0"]),
    (
        "block size not a divisor",
        lambda: BlockPool(16, 3, 2, 3),
        "block_size",
        ["(N, G, bs, D)", "3"],
    ),
    ("budget zero", lambda: _paged().add("t", 0), "budget", ["positive int", "0"]),
    ("budget a float", lambda: _paged().add("t", 2.5), "budget", ["positive int", "2.5"]),
    (
        "a latent wider than the model",
        lambda: MultiHeadLatentAttention(16, 4, latent_dim=17),
        "latent_dim",
        ["C <= embed_dim E = 16", "17"],
    ),
    (
        "int4 codes out of range",
        lambda: pack_int4(torch.tensor([[3, 9]], dtype=torch.int8)),
        "q",
        ["[-8, 7]", "[3, 9]"],
    ),
    (
        "a scale of another shape",
        lambda: dequantize(torch.zeros(1, 2, 3, 4, dtype=torch.int8), kv(1, 2, 3, 3)),
        "scale",
        ["(B, G, S, 1) or (B, G, 1, D)", "(1, 2, 3, 4)", "(1, 2, 3, 3)"],
    ),
    (
        "a scale that would grow the codes",
        lambda: dequantize(torch.zeros(1, 2, 1, 4, dtype=torch.int8), kv(1, 2, 3, 1)),
        "scale",
        ["(1, 2, 3, 1)"],
    ),
    (
        "codes that are not a tensor",
        lambda: dequantize([[1, 2]], kv(1, 1)),
        "q",
        ["torch.Tensor", "list"],
    ),
    ("a pool that is not a BlockPool", lambda: PagedKVCache(42), "pool", ["BlockPool", "42"]),
    ("a negative length", lambda: slots_needed([10, -5], 4), "lengths", ["int >= 0", "-5"]),
    (
        "a length that is a float",
        lambda: slots_needed([2.5], None, 8),
        "lengths",
        ["int >= 0", "2.5"],
    ),
    (
        "int4 codes of another dtype",
        lambda: pack_int4(torch.tensor([[3, 4]])),
        "q",
        ["int8", "torch.int64"],
    ),
    (
        "a value of another length than its key",
        lambda: KVCache().update(kv(1, 2, 3, 4), kv(1, 2, 2, 4)),
        "value",
        ["(B, G, S, Dv)", "(1, 2, 2, 4)"],
    ),
    (
        "a static value of another length",
        lambda: StaticKVCache(8).update(kv(1, 2, 3, 4), kv(1, 2, 2, 4)),
        "value",
        ["(B, G, S, Dv)", "(1, 2, 2, 4)"],
    ),
    (
        "a window value of another length",
        lambda: SlidingWindowCache(4).update(kv(1, 2, 3, 4), kv(1, 2, 2, 4)),
        "value",
        ["(B, G, S, Dv)", "(1, 2, 2, 4)"],
    ),
    (
        "a quantized value of another length",
        lambda: QuantizedKVCache().update(kv(1, 2, 3, 4), kv(1, 2, 2, 4)),
        "value",
        ["(B, G, S, Dv)", "(1, 2, 2, 4)"],
    ),
    (
        "a 3-D key",
        lambda: KVCache().update(kv(2, 3, 4), kv(2, 3, 4)),
        "key",
        ["(B, G, S, D)", "(2, 3, 4)"],
    ),
    (
        "integer keys",
        lambda: StaticKVCache(4).update(kv(1, 1, 1, 2, dtype=torch.long), kv(1, 1, 1, 2)),
        "key",
        ["floating-point", "torch.int64"],
    ),
    (
        "another head size after the first call",
        lambda: _filled(KVCache(), (1, 2, 3, 4), (1, 2, 3, 4)).update(
            kv(1, 2, 1, 5), kv(1, 2, 1, 4)
        ),
        "key",
        ["(B, G, S, D) = (1, 2, S, 4)", "(1, 2, 1, 5)"],
    ),
    (
        "another dtype after the first call",
        lambda: _filled(SlidingWindowCache(4), (1, 2, 3, 4), (1, 2, 3, 4)).update(
            kv(1, 2, 1, 4, dtype=torch.float32), kv(1, 2, 1, 4, dtype=torch.float32)
        ),
        "key",
        ["torch.float64", "torch.float32"],
    ),
    (
        "past max_len",
        lambda: _filled(StaticKVCache(4), (1, 2, 3, 4), (1, 2, 3, 4)).update(
            kv(1, 2, 2, 4), kv(1, 2, 2, 4)
        ),
        "key",
        ["max_len = 4", "3 cached + 2 new"],
    ),
    (
        "a quantized key of another width",
        lambda: _filled(QuantizedKVCache(), (1, 2, 3, 4), (1, 2, 3, 4)).update(
            kv(1, 2, 1, 6), kv(1, 2, 1, 4)
        ),
        "key",
        ["(B, G, S, D) = (1, 2, S, 4)", "(1, 2, 1, 6)"],
    ),
    (
        "an odd head size in 4 bits",
        lambda: QuantizedKVCache(4).update(kv(1, 2, 3, 5), kv(1, 2, 3, 4)),
        "key",
        ["(B, G, S, D) with D even", "(1, 2, 3, 5)"],
    ),
    (
        "a scale fp16 cannot hold",
        lambda: QuantizedKVCache().update(torch.full((1, 1, 1, 2), 1e7, dtype=f64), kv(1, 1, 1, 2)),
        "key",
        ["overflows", "float16"],
    ),
    (
        "a 2-D latent",
        lambda: LatentKVCache().update(kv(3, 6), kv(3, 2)),
        "latent",
        ["(B, S, C)", "(3, 6)"],
    ),
    (
        "a rotary key of another length than its latent",
        lambda: LatentKVCache().update(kv(1, 3, 6), kv(1, 2, 2)),
        "rope_key",
        ["(B, S, R) = (1, 3, R)", "(1, 2, 2)"],
    ),
    (
        "another rotary width after the first call",
        lambda: _filled(LatentKVCache(), (1, 3, 6), (1, 3, 2)).update(kv(1, 1, 6), kv(1, 1, 4)),
        "rope_key",
        ["(B, S, R) = (1, S, 2)", "(1, 1, 4)"],
    ),
    (
        "a paged key of another head size",
        lambda: _paged().append("s", kv(2, 1, 4), kv(2, 1, 4)),
        "key",
        ["(G, S, D) = (2, S, 3)", "(2, 1, 4)"],
    ),
    (
        "a paged value of another length",
        lambda: _paged().append("s", kv(2, 2, 3), kv(2, 1, 3)),
        "value",
        ["(G, S, D) with S = 2", "(2, 1, 3)"],
    ),
    (
        "paged keys of another dtype",
        lambda: _paged().append(
            "s", kv(2, 1, 3, dtype=torch.float32), kv(2, 1, 3, dtype=torch.float32)
        ),
        "key",
        ["torch.float64", "torch.float32"],
    ),
    (
        "past the budget",
        lambda: _paged().append("s", kv(2, 9, 3), kv(2, 9, 3)),
        "key",
        ["S = 9", "budget of 8"],
    ),
    (
        "a join step before zero",
        lambda: _batch(-1),
        "requests",
        ["join_step an int >= 0", "'r'", "-1"],
    ),
    ("a join step a float", lambda: _batch(1.0), "requests", ["join_step an int >= 0", "1.0"]),
    ("a join step a bool", lambda: _batch(True), "requests", ["join_step an int >= 0", "True"]),
    (
        "a batch of 2 for one paged sequence",
        lambda: _paged().sequence("s").update(kv(2, 2, 1, 3), kv(2, 2, 1, 3)),
        "key",
        ["(B, G, S, D) with B = 1", "(2, 2, 1, 3)"],
    ),
]


@pytest.mark.parametrize("what, call, arg, fragments", ROWS, ids=[r[0] for r in ROWS])
def test_bad_cache_input_raises_a_teaching_error(what, call, arg, fragments):
    with pytest.raises(ValueError, match=f"^{arg}: ") as err:
        call()
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
