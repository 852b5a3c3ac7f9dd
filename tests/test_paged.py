"""Chapter 16: paged attention — the block table maps positions to blocks; attention through the
table equals attention over a contiguous cache (MHA/GQA/MQA, with RoPE); continuous batching gives
each sequence what decoding it alone gives; prefix sharing by reference counts with copy-on-write;
bad inputs raise; Hypothesis over random lengths and block sizes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from mha_course import (
    BlockPool,
    KVCache,
    MultiHeadAttention,
    PagedKVCache,
    causal_mask,
    continuous_batching,
    paged_attention,
    paged_forward,
    scaled_dot_product_attention,
    slots_needed,
)
from mha_course.paged.decode import (
    SPAN_MAX_SEQUENCES,
    SPAN_MAX_SEQUENCES_CPU,
    first_of_run,
    read_path,
)

G, D = 2, 4
f64 = torch.float64


def fill(cache, seq_id, S, chunks=(1,)):
    k, v = torch.randn(G, S, D, dtype=f64), torch.randn(G, S, D, dtype=f64)
    start, i = 0, 0
    while start < S:
        n = min(chunks[i % len(chunks)], S - start)
        cache.append(seq_id, k[:, start : start + n], v[:, start : start + n])
        start, i = start + n, i + 1
    return k, v


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 23), min_size=1, max_size=4),
    block_size=st.sampled_from([1, 2, 3, 4, 8]),
    chunk=st.integers(1, 5),
    interleave=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_table_gather_and_attention_equal_contiguous(lengths, block_size, chunk, interleave, seed):
    torch.manual_seed(seed)
    blocks = sum(-(-n // block_size) for n in lengths)
    pool = BlockPool((blocks + 1) * block_size, block_size, G, D, dtype=f64)
    cache = PagedKVCache(pool)
    dense = {}
    for s, n in enumerate(lengths):
        cache.add(s, n)
        if interleave:  # the sequences grow a chunk each in turn (below)
            dense[s] = (torch.randn(G, n, D, dtype=f64), torch.randn(G, n, D, dtype=f64))
        else:
            dense[s] = fill(cache, s, n, (chunk,))
    for start in range(0, max(lengths), chunk) if interleave else ():
        for s, n in enumerate(lengths):
            if start < n:
                cache.append(
                    s, dense[s][0][:, start : start + chunk], dense[s][1][:, start : start + chunk]
                )
    assert pool.blocks_in_use == blocks
    for s in dense:  # logical position p lives in block table[p // bs] at offset p % bs
        k, v = cache.gather(s)
        assert_close(k, dense[s][0], rtol=0, atol=0)
        p = lengths[s] - 1
        assert_close(
            pool.key[cache.tables[s][p // block_size], :, p % block_size], dense[s][0][:, p]
        )
    ids = list(dense)
    q = torch.randn(len(ids), 4, 1, D, dtype=f64)  # H = 4 query heads over G = 2
    got = paged_attention(q, cache, ids)
    for b, s in enumerate(ids):
        k, v = dense[s]
        want = scaled_dot_product_attention(q[b : b + 1], k[None], v[None], enable_gqa=True)
        assert_close(got[b : b + 1], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rope", [None, "half"])
@pytest.mark.parametrize("Gkv", [None, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_paged_forward_prompt_then_decode_equals_kv_cache(Gkv, rope):
    torch.manual_seed(0)
    E, H = 16, 4
    m = MultiHeadAttention(E, H, num_kv_heads=Gkv, rope=rope, dtype=f64).eval()
    lengths = [7, 3, 11]
    xs = [torch.randn(1, n, E, dtype=f64) for n in lengths]
    pool = BlockPool(32, 4, m.num_kv_heads, m.head_dim, dtype=f64)
    cache = PagedKVCache(pool)
    for s, x in enumerate(xs):
        cache.add(s, x.shape[1])
        out = paged_forward(m, x[:, :2], cache, [s])  # a prompt chunk of 2
        assert_close(out, m(x[:, :2], is_causal=True)[0], rtol=1e-12, atol=1e-12)
    for t in range(2, max(lengths)):  # then one batched decode step at a time
        ids = [s for s in range(3) if t < lengths[s]]
        y = paged_forward(m, torch.cat([xs[s][:, t : t + 1] for s in ids]), cache, ids)
        for b, s in enumerate(ids):
            assert_close(
                y[b], m(xs[s][:, : t + 1], is_causal=True)[0][0, t : t + 1], rtol=1e-12, atol=1e-12
            )


@pytest.mark.parametrize(
    "layout, path",
    [("in order", "views"), ("interleaved", "masked span"), ("interleaved, far apart", "gather")],
)
@pytest.mark.parametrize("H", [2, 4], ids=["MHA", "GQA"])
def test_paged_attention_reads_each_layout_by_its_path(layout, path, H):
    """Each of read_path's ways (views; one masked SDPA over the span; keys and values gathered
    by one index) gives dense attention (float64), MHA and GQA, L = 2."""
    torch.manual_seed(3)
    bs, lengths, L = 4, [10, 7, 13], 2
    cache = PagedKVCache(BlockPool(256, bs, G, D, dtype=f64))
    dense = [(torch.randn(G, n, D, dtype=f64), torch.randn(G, n, D, dtype=f64)) for n in lengths]
    for s, n in enumerate(lengths):
        cache.add(s, n)
    if layout == "interleaved, far apart":  # another sequence's 9 blocks between each pair of ours
        cache.add("other", 9 * 11 * bs)
    writes = [(s, p) for s in range(3) for p in range(0, lengths[s], bs)]  # each sequence whole
    if layout != "in order":  # a block each in turn, as batched decoding makes them
        writes.sort(key=lambda w: (w[1], w[0]))
    for s, p in writes:
        cache.append(s, dense[s][0][:, p : p + bs], dense[s][1][:, p : p + bs])
        if layout == "interleaved, far apart" and s == 2:
            cache.append("other", *(torch.zeros(G, 9 * bs, D, dtype=f64),) * 2)
    tables = [cache.tables[s] for s in range(3)]
    assert read_path(tables) == read_path(tables, "cuda") == path  # B = 3: the same on both
    q = torch.randn(3, H, L, D, dtype=f64)  # the last L = 2 positions
    for forced in (None, "gather") + (("masked span",) if path == "masked span" else ()):
        got = paged_attention(q, cache, [0, 1, 2], path=forced)
        for s, (k, v) in enumerate(dense):
            S = lengths[s]
            mask = torch.arange(S)[None, :] <= torch.arange(S - L, S)[:, None]  # (L, S) causal
            want = scaled_dot_product_attention(
                q[s : s + 1], k[None], v[None], attn_mask=mask, enable_gqa=True
            )
            assert_close(got[s : s + 1], want, rtol=1e-12, atol=1e-12)


def test_read_path():
    for device in ("cpu", "cuda", torch.device("cpu")):
        assert read_path([[3, 4, 5], [0, 1]], device) == "views"
    for device in ("cpu", "cuda"):  # a pure function of the tables: no GPU needed
        assert read_path([[0, 2, 4], [1, 3, 5]], device) == "masked span"  # span 6, 6 held
    four = [[0, 4], [1, 5], [2, 6], [3, 7]]  # B = 4 interleaved: gathered on a CPU only
    assert read_path(four) == "gather" and read_path(four, "cuda") == "masked span"
    assert read_path(four[:SPAN_MAX_SEQUENCES_CPU]) == "masked span"
    assert read_path([[0, 20], [1, 21]], "cuda") == "gather"  # span 22 blocks, 4 held
    assert read_path([[0, 2]] + [[1]] * SPAN_MAX_SEQUENCES, "cuda") == "gather"  # too many
    assert read_path([[0, 2], []], "cuda") == "gather"  # a sequence that holds nothing yet
    with pytest.raises(ValueError, match="tables"):
        read_path([3, 4])  # one table, not a list of tables
    with pytest.raises(ValueError, match="device: expected a torch.device .* got 'gpu0'"):
        read_path([[0, 2], [1, 3]], "gpu0")


def test_first_of_run():
    assert first_of_run([3, 4, 5]) == 3 and first_of_run([7]) == 7
    assert (
        first_of_run([3, 5]) is None and first_of_run([4, 3]) is None and first_of_run([]) is None
    )


def test_paged_prompt_chunk_is_causal():
    pool = BlockPool(16, 4, G, D, dtype=f64)
    cache = PagedKVCache(pool)
    cache.add("a", 6)
    k, v = fill(cache, "a", 6, (6,))
    q = torch.randn(1, G, 6, D, dtype=f64)
    assert_close(
        paged_attention(q, cache, ["a"]),
        scaled_dot_product_attention(q, k[None], v[None], attn_mask=causal_mask(6)),
    )


def test_continuous_batching_equals_decoding_each_alone():
    torch.manual_seed(1)
    E, H = 16, 4
    m = MultiHeadAttention(E, H, num_kv_heads=2, rope="half", dtype=f64).eval()
    requests = {
        "a": (0, torch.randn(5, E, dtype=f64)),
        "b": (1, torch.randn(9, E, dtype=f64)),
        "c": (2, torch.randn(3, E, dtype=f64)),
        "d": (6, torch.randn(4, E, dtype=f64)),
    }
    pool = BlockPool(16, 4, 2, 4, dtype=f64)  # 4 blocks in all: freed blocks are reused
    outs, trace = continuous_batching(m, requests, PagedKVCache(pool))
    assert trace[:3] == [["a"], ["a", "b"], ["a", "b", "c"]] and "a" not in trace[5]
    assert trace[6] == ["b", "d"] and pool.blocks_in_use == 0
    for r, (_, x) in requests.items():
        cache = KVCache()
        want = torch.cat(
            [m(x[None, t : t + 1], kv_cache=cache, is_causal=True)[0] for t in range(len(x))], 1
        )
        assert_close(outs[r], want[0], rtol=1e-12, atol=1e-12)


def test_prefix_sharing_by_reference_counts():
    torch.manual_seed(2)
    pool = BlockPool(32, 4, G, D, dtype=f64)
    cache = PagedKVCache(pool)
    cache.add("p", 20)
    k, v = fill(cache, "p", 6, (6,))  # blocks: one full, one half-full
    cache.fork("p", "a")
    cache.fork("p", "b")
    assert pool.blocks_in_use == 2 and pool.refcount[cache.tables["p"][0]] == 3
    ka, va = torch.randn(G, 3, D, dtype=f64), torch.randn(G, 3, D, dtype=f64)
    cache.append("a", ka, va)  # writes into the shared half block: copied first
    assert cache.tables["a"][0] == cache.tables["p"][0] != None  # noqa: E711 (full block still shared)
    assert cache.tables["a"][1] != cache.tables["p"][1]
    assert_close(cache.gather("a")[0], torch.cat([k, ka], 1), rtol=0, atol=0)
    assert_close(cache.gather("p")[0], k, rtol=0, atol=0)  # the prefix owner is untouched
    assert_close(cache.gather("b")[0], k, rtol=0, atol=0)
    cache.remove("p")
    cache.remove("b")
    assert pool.refcount[cache.tables["a"][0]] == 1
    cache.remove("a")
    assert pool.blocks_in_use == 0


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="block_size.*divisor"):
        BlockPool(30, 4, G, D)
    with pytest.raises(ValueError, match="block_size"):
        BlockPool(32, 0, G, D)
    cache = PagedKVCache(BlockPool(32, 4, G, D))
    with pytest.raises(ValueError, match="seq_id.*unknown"):
        cache.append("nope", torch.zeros(G, 1, D), torch.zeros(G, 1, D))
    with pytest.raises(ValueError, match="seq_id"):
        paged_attention(torch.zeros(1, G, 1, D), cache, ["nope"])
    cache.add("a", 3)
    with pytest.raises(ValueError, match="budget of 3"):
        cache.append("a", torch.zeros(G, 4, D), torch.zeros(G, 4, D))
    with pytest.raises(ValueError, match=r"\(G, S, D\)"):
        cache.append("a", torch.zeros(G + 1, 1, D), torch.zeros(G + 1, 1, D))
    with pytest.raises(ValueError, match=r"\(B, H, L, D\)"):
        paged_attention(torch.zeros(2, G, 1, D), cache, ["a"])
    with pytest.raises(ValueError, match="already exists"):
        cache.add("a", 3)
    with pytest.raises(ValueError, match="path: expected None"):
        paged_attention(torch.zeros(1, G, 0, D), cache, ["a"], path="fast")
    cache.add("empty", 3)
    with pytest.raises(ValueError, match="path: 'masked span' needs"):
        paged_attention(torch.zeros(1, G, 0, D), cache, ["empty"], path="masked span")


def test_pool_exhaustion_is_an_error():
    cache = PagedKVCache(BlockPool(8, 4, G, D))
    cache.add("a", 100)
    with pytest.raises(RuntimeError, match="blocks are in use"):
        cache.append("a", torch.zeros(G, 9, D), torch.zeros(G, 9, D))


def test_slots_needed():
    assert slots_needed([1, 4, 5, 9], 4) == 4 + 4 + 8 + 12
    assert slots_needed([1, 4, 5, 9], max_len=16) == 64
    assert slots_needed([5], 1) == 5


def test_help_documents_what_a_scheduler_uses() -> None:
    """ex16's scheduler is written on BlockPool's ``allocate``, ``release``, ``refcount`` and ``free``;
    ``help(BlockPool)`` showed only the first two (issue 32)."""
    import pydoc

    from mha_course.paged.pool import BlockPool

    text = pydoc.render_doc(BlockPool, renderer=pydoc.plaintext)
    for what in ("free:", "refcount:", "len(pool.free)", "pool.refcount[b] += 1"):
        assert what in text, what
    for method in (BlockPool.allocate, BlockPool.release, BlockPool.blocks_in_use.fget):
        assert method.__doc__, method


def test_gather_buffers_are_reused_grown_and_kept_for_one_thread():
    """On a CPU the gather path's buffers outlive a call (fresh memory is page-faulted in each
    time): the same memory comes back for as many rows or fewer, larger buffers for more; another
    thread never gets the memory a thread holds; one over KEPT_BUFFER_BYTES is not kept."""
    import threading

    from mha_course.paged.pool import KEPT_BUFFER_BYTES

    pool = BlockPool(64, 4, 2, 8)  # a block of one head: bs·D = 32 floats
    k, v = pool.gather_buffers(3)
    assert k.shape == v.shape == (3, 32) and k.data_ptr() != v.data_ptr()
    assert pool.gather_buffers(2)[0].data_ptr() == k.data_ptr()  # reused
    k5, v5 = pool.gather_buffers(5)
    assert k5.shape == v5.shape == (5, 32)  # grown
    assert pool.gather_buffers(5)[0].data_ptr() == k5.data_ptr()
    seen = []
    t = threading.Thread(target=lambda: seen.append(pool.gather_buffers(5)[0].data_ptr()))
    t.start()
    t.join()
    assert seen and seen[0] not in (k5.data_ptr(), v5.data_ptr())
    big = KEPT_BUFFER_BYTES // (32 * 4) + 1  # rows of 32 floats: just over the limit
    assert pool.gather_buffers(big)[0].data_ptr() != pool.gather_buffers(big)[0].data_ptr()
    with pytest.raises(ValueError, match="rows"):
        pool.gather_buffers(0)


def test_gathered_reads_keep_their_gradient_across_calls():
    """With a query that needs gradients the gather path reads into fresh tensors, never the
    kept buffers (autograd saves what the products read): a second call, which refills the
    buffers, leaves the first call's gradient that of dense attention."""
    torch.manual_seed(4)
    B, bs, S = 4, 4, 12
    k, v = torch.randn(B, G, S, D, dtype=f64), torch.randn(B, G, S, D, dtype=f64)
    cache = PagedKVCache(BlockPool(B * S, bs, G, D, dtype=f64))
    for b in range(B):
        cache.add(b, S)
    for p in range(0, S, bs):  # a block each in turn: interleaved, gathered on a CPU (B = 4)
        for b in range(B):
            cache.append(b, k[b, :, p : p + bs], v[b, :, p : p + bs])
    assert read_path([cache.tables[b] for b in range(B)]) == "gather"
    q = torch.randn(B, G, 1, D, dtype=f64, requires_grad=True)
    first = paged_attention(q, cache, list(range(B)))
    paged_attention(q * 2, cache, list(range(B)))  # would overwrite a kept buffer
    (got,) = torch.autograd.grad(first.sum(), q)
    q_ref = q.detach().requires_grad_()
    (want,) = torch.autograd.grad(scaled_dot_product_attention(q_ref, k, v).sum(), q_ref)
    assert_close(got, want, rtol=1e-12, atol=1e-12)
