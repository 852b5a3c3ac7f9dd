"""The model ex16's serving loop drives: a one-layer attention language model whose keys and values
live in a :class:`~mha_course.paged.pool.BlockPool`, read and written through the block table the
scheduler hands it. Seeded (its own ``torch.Generator``), float64, small enough that a whole
request trace decodes in well under a second.

The scheduler decides WHERE a request's keys/values go (its table) and what must be computed (a
prefill of the tokens not found in the prefix cache, a decode of the newest token); the model
does the arithmetic. So the tokens it returns equal dense decoding (:meth:`PagedToyLM.dense_greedy`,
no cache at all) exactly when the scheduler's tables are right: a preempted request resumed
without recompute, or a shared prefix block overwritten, changes the tokens, not the block counts.

Runs in the CHILD (the driver builds it from the case's seed) and in the PARENT (the reference's
dense decoding); it holds no answer of the item (the scheduling is the task).
"""

from __future__ import annotations

import math

import torch

from mha_course.paged.pool import BlockPool

VOCAB, EMBED, HEADS, KV_HEADS, MAX_LEN = 256, 16, 4, 2, 64
ATTN_GAIN = (
    4.0  # so that what a token attends to moves its next token (tests/grading/test_paged_model.py)
)


class PagedToyLM:
    """``model(tokens, table, start) -> next token``; ``model.pool`` holds the blocks.

    Shape:
        tokens: n token ids (positions start .. start + n - 1 of the request); table: the
        request's blocks, at least ceil((start + n) / bs). Returns an int, the greedy next token.
    """

    def __init__(self, seed: int, num_blocks: int, block_size: int) -> None:
        g = torch.Generator().manual_seed(int(seed) % 2**63)
        E, D = EMBED, EMBED // HEADS

        def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

        self.wte, self.wpe = rand(VOCAB, E), rand(MAX_LEN, E, scale=0.5)
        self.w_q, self.w_o = rand(E, E, scale=E**-0.5), rand(E, E, scale=E**-0.5)
        self.w_k, self.w_v = (
            rand(KV_HEADS * D, E, scale=E**-0.5),
            rand(KV_HEADS * D, E, scale=E**-0.5),
        )
        self.w_u = rand(
            VOCAB, E, scale=E**-0.5
        )  # the read-out (untied: no bias to repeat the last token)
        self.block_size, self.vocab_size = int(block_size), VOCAB
        self.pool = BlockPool(
            int(num_blocks) * self.block_size, self.block_size, KV_HEADS, D, dtype=torch.float64
        )

    def _check(self, tokens: list, table: list, start: object) -> None:
        if type(start) is not int or start < 0:
            raise ValueError(
                f"start: expected an int >= 0 (the position of tokens[0]), got {start!r}"
            )
        if not tokens or not all(type(t) is int and 0 <= t < VOCAB for t in tokens):
            raise ValueError(
                f"tokens: expected a non-empty list of ints in [0, {VOCAB}), got {tokens!r}"
            )
        N, need = self.pool.num_blocks, -(-(start + len(tokens)) // self.block_size)
        if not all(type(b) is int and 0 <= b < N for b in table) or len(table) < need:
            raise ValueError(
                f"table: expected at least ceil((start + n) / bs) = {need} blocks of the "
                f"pool, ints in [0, {N}), got {table!r}"
            )
        if start + len(tokens) > MAX_LEN:
            raise ValueError(
                f"tokens: expected start + n <= {MAX_LEN} positions, got {start + len(tokens)}"
            )

    def logits(self, tokens: list, table: list, start: int) -> torch.Tensor:
        """Write ``tokens``' keys/values at positions start.. through ``table``, then attend from
        the last of them to positions 0 .. start + n - 1 read back through ``table``.

        Shape:
            Returns (V,) logits of the next token.
        """
        tokens = [int(t) for t in tokens] if isinstance(tokens, torch.Tensor) else list(tokens)
        table = [int(b) for b in table] if isinstance(table, torch.Tensor) else list(table)
        if isinstance(start, torch.Tensor) and start.dim() == 0 and not start.is_floating_point():
            start = int(
                start
            )  # a 0-d integer tensor (written[i] kept as a tensor) is a position too
        self._check(tokens, table, start)
        n, bs, D = len(tokens), self.block_size, EMBED // HEADS
        x = self.wte[torch.tensor(tokens)] + self.wpe[start : start + n]  # (n, E)
        pos = torch.arange(start, start + n)
        blocks, offsets = torch.tensor(table)[pos // bs], pos % bs
        self.pool.key[blocks, :, offsets] = (x @ self.w_k.T).view(
            n, KV_HEADS, D
        )  # (n, G*D) -> (n, G, D)
        self.pool.value[blocks, :, offsets] = (x @ self.w_v.T).view(n, KV_HEADS, D)
        every = torch.arange(start + n)
        rows, cols = torch.tensor(table)[every // bs], every % bs
        return self._read_out(x[-1], self.pool.key[rows, :, cols], self.pool.value[rows, :, cols])

    def _read_out(self, x: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """One query's attention over (S, G, D) keys/values, the residual and the read-out.

        Shape:
            x: (E,). Returns (V,).
        """
        D = EMBED // HEADS
        q = (self.w_q @ x).view(HEADS, D)  # (E,) -> (H, D)
        k = key.repeat_interleave(HEADS // KV_HEADS, dim=1)  # (S, G, D) -> (S, H, D)
        v = value.repeat_interleave(HEADS // KV_HEADS, dim=1)
        s = torch.einsum("hd,shd->hs", q, k) / math.sqrt(D)  # (H, S)
        w = (s - s.amax(dim=-1, keepdim=True)).exp()  # by hand: torch.softmax's thread pool costs
        w = w / w.sum(dim=-1, keepdim=True)  # ~20 ms per call on a loaded machine, this ~0.1 ms
        out = torch.einsum("hs,shd->hd", w, v).reshape(EMBED)  # (H, D) -> (E,)
        return self.w_u @ (
            x + ATTN_GAIN * (self.w_o @ out)
        )  # the attention output weighs as much as the token

    def __call__(self, tokens: list, table: list, start: int) -> int:
        logits = self.logits(tokens, table, start).tolist()  # (V,) as floats
        return max(
            range(VOCAB), key=logits.__getitem__
        )  # the first of equal maxima, as dense_greedy

    def dense_greedy(self, prompt: list, n_new: int) -> tuple[list, float]:
        """Greedy decoding with no cache at all (every step recomputes every key/value), and the
        smallest gap between the best and second-best logit on the way (a tie would make the
        paged and dense tokens depend on rounding).

        Shape:
            prompt: P ids. Returns n_new ids and a float.
        """
        toks, gap, D = list(prompt), math.inf, EMBED // HEADS
        for _ in range(n_new):
            x = self.wte[torch.tensor(toks)] + self.wpe[: len(toks)]  # (T, E)
            key = (x @ self.w_k.T).view(len(toks), KV_HEADS, D)
            value = (x @ self.w_v.T).view(len(toks), KV_HEADS, D)
            logits = self._read_out(x[-1], key, value).tolist()  # (V,) as floats
            best = max(range(VOCAB), key=logits.__getitem__)
            gap = min(gap, logits[best] - max(v for t, v in enumerate(logits) if t != best))
            toks.append(best)
        return toks[len(prompt) :], gap
