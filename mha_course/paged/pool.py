"""Chapter 16 (2/2), the memory: one pool of fixed-size physical blocks (vLLM's PagedAttention,
Kwon et al., 2023) and how many token slots a paged or a preallocated cache reserves.

Keys and values of all sequences live in one pool of ``num_tokens / block_size`` blocks of
``block_size`` tokens; a block is handed out by :meth:`BlockPool.allocate` and returned when its
reference count drops to zero (sequences sharing a prompt prefix share its blocks).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from mha_course._checks import check_nonnegative_int, check_positive_int

# gather_buffers keeps a buffer up to this size on a CPU (one pair of (sequence, head) at
# S = 32768, D = 128 in float32 is 16 MiB); a larger one is allocated each call
KEPT_BUFFER_BYTES = 16 * 2**20


class BlockPool:
    """``num_tokens / block_size`` physical blocks of keys and values, with reference counts.

    ``key``/``value`` are (N, G, bs, D): block ``n`` is ``key[n]``. They are views of
    ``key_heads``/``value_heads`` (G, N, bs, D), which is how the pool is laid out in memory: the
    blocks of one key/value head sit next to each other, so a sequence whose blocks were handed out
    in order reads, head by head, as ONE contiguous (S, D) tensor, exactly as a dense cache holds
    it (:func:`mha_course.paged_attention` uses that view; interleaved blocks it reads as one masked
    span of the pool, or gathers).

    Attributes:
        free: the blocks no sequence holds, a list used as a stack: :meth:`allocate` pops from its
            end, :meth:`release` appends a block whose count drops to 0. ``len(pool.free)`` is how many
            blocks can still be handed out (a scheduler checks it before admitting a request).
        refcount: ``refcount[b]``, how many sequences hold block ``b`` (a list of N ints): 0 = free,
            1 = one owner, 2 or more = shared (a prompt prefix found by its hash). Sharing a block is
            ``pool.refcount[b] += 1``; :meth:`release` undoes one holder.
        block_size, num_blocks: bs tokens per block, N blocks.

    Shape:
        key, value: (N, G, bs, D); key_heads, value_heads: (G, N, bs, D); N = num_tokens / bs.
    """

    def __init__(
        self,
        num_tokens: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_positive_int("num_tokens", num_tokens)
        check_positive_int("block_size", block_size)
        if num_tokens % block_size:
            raise ValueError(
                f"block_size: expected a divisor of num_tokens = {num_tokens} (the pool "
                f"is (N, G, bs, D) with N = num_tokens / bs), got {block_size}"
            )
        G, D = (
            check_positive_int("num_kv_heads", num_kv_heads),
            check_positive_int("head_dim", head_dim),
        )
        N = num_tokens // block_size
        self.block_size, self.num_blocks = block_size, N
        self.key_heads = torch.zeros(G, N, block_size, D, dtype=dtype, device=device)
        self.value_heads = torch.zeros_like(self.key_heads)
        self.key = self.key_heads.transpose(0, 1)  # (G, N, bs, D) -> (N, G, bs, D), a view
        self.value = self.value_heads.transpose(0, 1)
        self.refcount = [0] * N
        self.free = list(range(N - 1, -1, -1))  # a stack: pop() hands out block 0 first
        # (thread, (keys, values)): the buffers gather_buffers keeps for the thread that asked last
        self._gather_buffers: tuple[int | None, tuple[torch.Tensor, torch.Tensor] | None] = (
            None,
            None,
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (allocated up front)."""
        return 2 * self.key.numel() * self.key.element_size()

    @property
    def blocks_in_use(self) -> int:
        """Blocks held by at least one sequence: ``num_blocks - len(free)``."""
        return self.num_blocks - len(self.free)

    def gather_buffers(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Two buffers of ``rows`` blocks of one head each, for the keys and the values that
        :func:`mha_course.paged_attention` gathers (without autograd). On a CPU, one pair of up
        to ``KEPT_BUFFER_BYTES`` each is kept for the thread that asked last and handed back to its
        next call: fresh memory of this size is page-faulted in on every call (about a fifth of the
        gather path's extra time over dense at S = 8192, ``benchmarks/README.md``). What it returns
        is valid until that thread's next call. Larger buffers, other threads' and a GPU's are
        new each call (a GPU's caching allocator already reuses device memory, and a GPU's slice
        holds the whole batch: keeping it would double the cache's memory).

        Shape:
            returns (rows, bs·D) twice.
        """
        rows = check_positive_int("rows", rows, "(blocks to gather)")
        _, _, bs, D = self.key_heads.shape
        nbytes = rows * bs * D * self.key_heads.element_size()
        if self.key_heads.device.type != "cpu" or nbytes > KEPT_BUFFER_BYTES:
            return (
                self.key_heads.new_empty(rows, bs * D),
                self.value_heads.new_empty(rows, bs * D),
            )
        owner, kept = self._gather_buffers
        if owner != threading.get_ident() or kept is None or kept[0].shape[0] < rows:
            kept = (
                self.key_heads.new_empty(rows, bs * D),
                self.value_heads.new_empty(rows, bs * D),
            )
            self._gather_buffers = (threading.get_ident(), kept)
        return kept[0][:rows], kept[1][:rows]

    def allocate(self) -> int:
        """Hand out a free block with ``refcount`` 1 and return its index; RuntimeError when ``free``
        is empty."""
        if not self.free:
            raise RuntimeError(
                f"pool: all {self.num_blocks} blocks are in use; free a sequence "
                f"or make the pool larger"
            )
        block = self.free.pop()
        self.refcount[block] = 1
        return block

    def release(self, block: int) -> None:
        """One holder lets go of ``block``: its ``refcount`` drops by 1, and at 0 it goes back on ``free``
        (its keys and values are then stale: the next owner writes over them)."""
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free.append(block)


def slots_needed(
    lengths: Sequence[int], block_size: int | None = None, max_len: int | None = None
) -> int:
    """Token slots a cache reserves for sequences of these lengths: paged, ``ceil(l / bs) · bs``
    each; preallocated (``block_size=None``), ``max_len`` each. Times
    :func:`mha_course.kv_cache_bytes` per token to get bytes.
    """
    for n in lengths:
        check_nonnegative_int("lengths", n, "(tokens per sequence)")
    if block_size is None:
        return len(lengths) * check_positive_int("max_len", max_len)
    bs = check_positive_int("block_size", block_size)
    return sum(-(-n // bs) * bs for n in lengths)
