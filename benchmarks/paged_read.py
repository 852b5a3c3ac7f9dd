"""Chapter 16 benchmark: the ways of reading INTERLEAVED paged blocks that were tried, side by side.

    .venv/bin/python benchmarks/paged_read.py            # S = 8192, B = 4, H = G = 16, D = 64, bs = 16
    .venv/bin/python benchmarks/paged_read.py --S 1024   # smaller

The B sequences' blocks were handed out a block each in turn (as batched decoding grows them), so
no sequence's blocks are one run and none can be read as a view. One decode step (one query token
per sequence), each way checked against dense SDPA before it is timed:

- ``dense``: SDPA over a dense (B, H, S, D) cache, the reference;
- ``gather``: per (sequence, head), ``index_select`` of its blocks into a reused buffer, then
  attention on it (what ``paged_attention`` did before);
- ``gather in L2-sized chunks``: the same, 64 blocks at a time (the buffer stays in the core's L2;
  scores of all chunks, one softmax, then the values chunk by chunk);
- ``gather by one index``: ``paged_attention(..., path="gather")``, ``read_path``'s choice on a
  CPU from B = 4 (the default here): a slice of (sequence, head) pairs at a time, all their blocks gathered by ONE ``index_select`` into
  buffers the pool keeps for the next call, one batched attention per slice (before issue 33 it
  gathered the keys per pair and summed the values in place with ``F.embedding_bag``);
- ``span, one masked SDPA``: ``paged_attention(..., path="masked span")``, ``read_path``'s choice
  for such a batch on a CPU up to B = 3 and elsewhere up to B = 8: ONE SDPA over the span of pool
  blocks the batch fills (a view), a mask keeping each query to its own sequence's keys (B times
  the dot products).

Also tried, not timed here (a few runs on the course's shared 2-core machine, load 8-15):
``torch.compile`` of the gather-and-reduce written as indexing and sums (94 s to compile, then
2.25x dense: the gather was not fused into the reductions); a batched matmul over strided views
of the blocks (2.1x dense: many tiny matmuls); scores of every query against the span with the
values by ``embedding_bag`` (1.4-1.7x, and B times the dot products).
Prints median ms, the ratio to dense (the median of per-round ratios, with their quartiles) and the
load average. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F

from mha_course import BlockPool, PagedKVCache, paged_attention
from mha_course.benchmark.timing import round_ratios, time_interleaved
from mha_course.paged.decode import read_path


def ways(B: int, H: int, S: int, D: int, bs: int) -> tuple[dict, torch.Tensor]:
    """name -> callable for one decode step over interleaved blocks; and the dense reference."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, D, generator=g) for n in (1, S, S))
    cache = PagedKVCache(BlockPool(B * (S + bs), bs, H, D))
    for b in range(B):
        cache.add(b, S)
    for p in range(0, S, bs):  # a block each in turn
        for b in range(B):
            cache.append(b, k[b, :, p : p + bs], v[b, :, p : p + bs])
    tables = [cache.tables[b] for b in range(B)]
    # the layout, not the CPU choice: no run to read as a view, and the batch fills its span
    assert read_path(tables, "cuda") == "masked span"
    pool = cache.pool
    N, M = pool.num_blocks, S // bs
    k_rows, v_rows = (
        t.view(H, N, bs * D) for t in (pool.key_heads, pool.value_heads)
    )  # a block a row
    index = [torch.tensor(t) for t in tables]  # (M,) blocks
    qs = q * D**-0.5
    k_buf, v_buf = torch.empty(M, bs * D), torch.empty(M, bs * D)

    def per_head(step):  # step(b, h) -> (1, D)
        return lambda: torch.stack([step(b, h) for b in range(B) for h in range(H)]).view(
            B, H, 1, D
        )

    def gather(b, h):
        kk = torch.index_select(k_rows[h], 0, index[b], out=k_buf).view(S, D)  # (M, bs D) -> (S, D)
        vv = torch.index_select(v_rows[h], 0, index[b], out=v_buf).view(S, D)
        return torch.softmax(qs[b, h] @ kk.T, -1) @ vv  # (1, S) @ (S, D)

    c = 64  # blocks per chunk: 64 x 4 KiB keys + values, in a 1 MiB L2
    ck, cv = torch.empty(c, bs * D), torch.empty(c, bs * D)

    def chunked(b, h):
        scores = torch.empty(1, S)
        for i, blocks in enumerate(index[b].split(c)):
            kk = torch.index_select(k_rows[h], 0, blocks, out=ck[: len(blocks)]).view(-1, D)
            torch.mm(qs[b, h], kk.T, out=scores[:, i * c * bs : i * c * bs + kk.shape[0]])
        w, out = torch.softmax(scores, -1), torch.zeros(1, D)
        for i, blocks in enumerate(index[b].split(c)):
            vv = torch.index_select(v_rows[h], 0, blocks, out=cv[: len(blocks)]).view(-1, D)
            out.addmm_(w[:, i * c * bs : i * c * bs + vv.shape[0]], vv)
        return out

    return {
        "dense": lambda: F.scaled_dot_product_attention(q, k, v),
        "gather": per_head(gather),
        "gather in L2-sized chunks": per_head(chunked),
        "gather by one index": lambda: paged_attention(q, cache, list(range(B)), path="gather"),
        "span, one masked SDPA": lambda: paged_attention(
            q, cache, list(range(B)), path="masked span"
        ),
    }, F.scaled_dot_product_attention(q, k, v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--S", type=int, default=8192)
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--H", type=int, default=16)
    p.add_argument("--D", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    if args.S % args.block_size:
        raise ValueError(
            f"--S: expected a multiple of --block-size {args.block_size}, got {args.S}"
        )
    fns, want = ways(args.B, args.H, args.S, args.D, args.block_size)
    for name, fn in fns.items():  # never time a wrong answer
        torch.testing.assert_close(fn(), want, rtol=1e-4, atol=1e-5, msg=name)
    load = os.getloadavg()[0]
    res = time_interleaved(
        fns, torch.device("cpu"), rounds=args.rounds, threads=args.threads, min_block_s=0.02
    )
    print(
        f"CPU, {args.threads} thread(s), {os.cpu_count()} cores, load average {load:.1f} -> "
        f"{os.getloadavg()[0]:.1f}; B={args.B} H={args.H} S={args.S} D={args.D} float32, "
        f"block size {args.block_size}, blocks interleaved; {args.rounds} interleaved rounds, medians"
    )
    for name, r in res.items():
        rr = round_ratios(r, res["dense"])  # per round, then the median
        print(
            f"{name:>28} {r['ms_median']:9.2f} ms {rr['median']:6.2f}x dense "
            f"(quartiles {rr['q1']:.2f}-{rr['q3']:.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
