"""The graders' reference for ex16's serving loop: a paged scheduler's block accounting.

Written without the course's ``BlockPool`` (plain lists and counts), so it is an oracle of its own
for the learner's loop built on it. One switch per known mistake (``mode``). Runs in the PARENT; the
staged copy a sandbox sees has :func:`serve_reference` absent (ex16's forbidden list).

The rules (the exercise states them; vLLM's automatic prefix caching and nano-vllm's scheduler work
the same way, less their free-block LRU and batch limits):

- A request's tokens are its prompt and the tokens it has emitted. A step either *prefills* a
  request (writes the keys/values of all its tokens, ceil(m / bs) blocks, and emits one token) or
  *decodes* it (writes its newest token, a new block when that token starts one, and emits one).
- Each step: arrivals join the back of the waiting queue; running requests decode, oldest first;
  one that needs a block when none is free preempts the NEWEST running request (possibly itself):
  its blocks are released and it waits at the front of the queue, to be prefilled again with all
  its tokens (recompute). Only a step that preempted nobody admits: waiting requests, front first,
  while each one's new blocks fit in the free ones (the first that does not fit stops admission).
- Prefix caching: full block j of the tokens has hash h_j = hash((h_{j-1}, tokens of block j));
  a block in use whose hash matches is shared (reference count + 1) instead of allocated, up to the
  first miss. The partial last block is never hashed. A block whose count drops to 0 is free and
  forgets its hash.
- "Only a step that preempted nobody admits" changes no output on any trace: the preempted request
  waits at the front, needs at least the blocks its release freed (its tokens only grew, and the
  blocks it still shares stay cached either way), and the preempting request took one of them, so
  admission would stop at it anyway. ``mode="admits after preemption"`` ignores the rule; it is not a
  named mistake: tests/grading/test_serving_reference.py shows it equal to "ok" on every trace tried.
- ``used[s]``, ``shared[s]``: blocks in use, and blocks with two or more users, after step s's
  writes, before the requests that emitted their last token this step release their blocks.
"""

from __future__ import annotations

from collections import deque

import numpy as np

MODES = (
    "ok",
    "partial block hashed",
    "no parent",
    "not freed",
    "oldest preempted",
    "admits after preemption",
)


def serve_reference(
    prompts,
    arrivals,
    outputs,
    block_size,
    num_blocks,
    num_steps,
    mode="ok",
    record: dict | None = None,
):
    """``(used, shared, preemptions, finish)`` of the serving loop on a request trace.

    Shape:
        prompts: (n, P_max) int, -1 pads; arrivals: (n,) int; outputs: (n, N_max) int, the tokens
        each request emits, -1 pads. Returns used (num_steps,), shared (num_steps,),
        preemptions (n,), finish (n,) (the step of the last token, -1 if not done).
        ``record`` (a dict, if given) gets request -> tokens it had emitted when first preempted.
    """
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    prompts, outputs = np.asarray(prompts), np.asarray(outputs)
    arrivals = np.asarray(arrivals).tolist()
    bs, n = int(block_size), len(arrivals)
    tokens = [[int(t) for t in row if t >= 0] for row in prompts]  # prompt + emitted so far
    todo = [[int(t) for t in row if t >= 0] for row in outputs]
    emitted, kv, tables = [0] * n, [0] * n, [[] for _ in range(n)]
    refcount, free = [0] * int(num_blocks), list(range(int(num_blocks)))
    cached: dict = {}  # hash -> block in use
    hash_of: dict = {}  # block -> its hash
    waiting, running = deque(), []
    used, shared = np.zeros(num_steps, np.int64), np.zeros(num_steps, np.int64)
    preempted, finish = np.zeros(n, np.int64), np.full(n, -1, np.int64)

    def allocate(h=None) -> int:
        b = free.pop(0)
        refcount[b] = 1
        if h is not None and h not in cached:  # (equal hashes: only "no parent" makes them)
            cached[h], hash_of[b] = b, h
        return b

    def release(i: int) -> None:
        for b in tables[i]:
            refcount[b] -= 1
            if refcount[b] == 0:
                free.append(b)
                if b in hash_of:
                    del cached[hash_of.pop(b)]
        tables[i], kv[i] = [], 0

    def emit(i: int, step: int, done: list) -> bool:
        """Emit i's next token; True when that was its last (it leaves the batch now, its
        blocks stay in use until the end of the step)."""
        tokens[i].append(todo[i][emitted[i]])
        emitted[i] += 1
        if emitted[i] == len(todo[i]):
            finish[i] = step
            done.append(i)
        return emitted[i] == len(todo[i])

    def hashes(toks: list) -> list:
        out, parent = [], None
        n_blocks = -(-len(toks) // bs) if mode == "partial block hashed" else len(toks) // bs
        for j in range(n_blocks):
            block = tuple(toks[j * bs : (j + 1) * bs])
            parent = block if mode == "no parent" else hash((parent, block))
            out.append(parent)
        return out

    for step in range(num_steps):
        waiting.extend(i for i in range(n) if arrivals[i] == step)
        done: list = []
        any_preempted = False
        for i in list(running):
            if i not in running:
                continue  # preempted earlier in this step
            if kv[i] % bs == 0:  # its newest token starts a new block
                while not free:
                    others = [r for r in running if r != i]
                    victim = (
                        (others[0] if others else i) if mode == "oldest preempted" else running[-1]
                    )
                    running.remove(victim)
                    release(victim)
                    waiting.appendleft(victim)
                    preempted[victim] += 1
                    if record is not None:
                        record.setdefault(victim, emitted[victim])
                    any_preempted = True
                    if victim == i:
                        break
                if i not in running:
                    continue
                tables[i].append(allocate())
            kv[i] += 1
            if emit(i, step, done):
                running.remove(i)
        while waiting and (not any_preempted or mode == "admits after preemption"):
            i = waiting[0]
            hs = hashes(tokens[i])
            hits = 0
            while hits < len(hs) and hs[hits] in cached:
                hits += 1
            need = -(-len(tokens[i]) // bs) - hits
            if need > len(free):
                break
            waiting.popleft()
            for h in hs[:hits]:
                refcount[cached[h]] += 1
            tables[i] = [cached[h] for h in hs[:hits]]
            tables[i] += [
                allocate(hs[j] if j < len(hs) else None) for j in range(hits, hits + need)
            ]
            kv[i] = len(tokens[i])
            if not emit(i, step, done):
                running.append(i)
        used[step] = int(num_blocks) - len(free)
        shared[step] = sum(c > 1 for c in refcount)
        for i in done:
            if mode != "not freed":
                release(i)
    return used, shared, preempted, finish
