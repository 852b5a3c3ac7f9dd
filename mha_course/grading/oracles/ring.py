"""Exercise 19's ring, held by the PARENT: ``RingService`` hands the child's ring driver
(``child.ring_driver.drive_ring``) one key/value block at a time, in ring order, and checks every
intermediate state against the partial attention over the blocks given so far.

Why: the driver runs in the learner's process, so whatever it holds, a ``ring_step`` can read
(``sys._getframe``, ``inspect``, ``gc``). With the whole keys and values there, a step could
answer the final attention at every step, with no ring and no merge (issue #30, route 5). Here
the child never gets the keys and values as a whole (the item hides them), and a block is handed
out only after the state of the step before (a state that is not the partial over the blocks
given so far, or blocks asked for out of order, fail the item).
"""

from __future__ import annotations

import numpy as np
import torch

from mha_course.grading.child.ring_driver import assemble_ring, from_wire, to_wire
from mha_grader.sandbox.channel import Service, Violation, want_int, want_keys

RTOL, ATOL = 1e-3, 1e-4  # the item's own tolerance


def partial_state(query, key, value, positions, sources, is_causal, scale, r: int, s: int):
    """Rank ``r``'s state after ``s`` steps: float64 attention of its queries over the key/value
    blocks ``sources[r, :s]`` (global positions for the causal mask), and its log-sum-exp; out 0
    and lse -inf where a query has no key yet.

    Shape: returns out (B, H, T/P, Dv), lse (B, H, T/P)."""
    q, k, v = (torch.as_tensor(np.asarray(x)).double() for x in (query, key, value))
    qp = torch.as_tensor(np.asarray(positions[r])).long()
    kp = (
        torch.cat(
            [torch.as_tensor(np.asarray(positions[int(sources[r, j])])).long() for j in range(s)]
        )
        if s
        else torch.zeros(0, dtype=torch.long)
    )
    scores = (q[..., qp, :] @ k[..., kp, :].transpose(-2, -1)) * float(scale)
    if is_causal:
        scores = scores.masked_fill(kp[None, :] > qp[:, None], float("-inf"))
    lse = (
        torch.logsumexp(scores, -1)
        if s
        else torch.full(scores.shape[:-1], float("-inf"), dtype=torch.float64)
    )
    w = torch.where(
        torch.isinf(lse)[..., None], torch.zeros_like(scores), torch.exp(scores - lse[..., None])
    )
    return w @ v[..., kp, :], lse


def state_right(state, want) -> bool:
    """Is a learner's state (out, lse) the partial ``want``, within the item's tolerance?"""
    for got, ref in zip(state, want):
        got, ref = np.asarray(got, dtype=np.float64), ref.numpy()
        if got.shape != ref.shape or not np.allclose(got, ref, rtol=RTOL, atol=ATOL):
            return False
    return True


def run_ring(step, query, key, value, positions, sources, is_causal, scale):
    """PARENT: a whole ring through ``step`` (a mistake's simulation), as the service judges it:
    (out (B, H, T, Dv), lse (B, H, T), whether every intermediate state was right)."""
    P, scale = positions.shape[0], float(scale)
    parts, ok = {}, True
    for r in range(P):
        qp = positions[r]
        out = query.new_zeros(*query.shape[:-2], len(qp), value.shape[-1])
        lse = query.new_full((*query.shape[:-2], len(qp)), float("-inf"))
        for s in range(P):
            kp = positions[int(sources[r, s])]
            out, lse = step(
                out,
                lse,
                query[..., qp, :],
                key[..., kp, :],
                value[..., kp, :],
                qp.clone(),
                kp.clone(),
                bool(is_causal),
                scale,
            )
            ok = ok and state_right(
                (out, lse),
                partial_state(query, key, value, positions, sources, is_causal, scale, r, s + 1),
            )
        parts[r] = (out, lse)
    return (*assemble_ring(query, positions, parts), torch.tensor(ok))


class RingService(Service):
    """PARENT side of one case's ring: op ``block`` {rank, step, out, lse} -> {key, value}.

    Requests come in ring order (rank 0 steps 0..P, rank 1 ...); ``out``/``lse`` are the state
    after the previous step (``null`` at step 0); step P only reports the rank's final state."""

    def __init__(self, case: dict) -> None:
        self.case = case
        self.P = int(np.asarray(case["positions"]).shape[0])
        self.next, self.ok = (0, 0), True

    def handle(self, op: str, args: dict) -> dict:
        if op != "block":
            raise Violation("not an op of the ring")
        want_keys(args, "rank", "step", "out", "lse")
        r, s = want_int(args, "rank", 0, self.P - 1), want_int(args, "step", 0, self.P)
        if (r, s) != self.next:
            raise Violation(
                f"blocks are handed out in ring order: expected rank {self.next[0]} "
                f"step {self.next[1]}, got rank {r} step {s}"
            )
        c = self.case
        if s > 0:
            try:
                state = (from_wire(args["out"]), from_wire(args["lse"]))
            except ValueError as e:
                raise Violation(f"state: {e}") from None
            want = partial_state(
                *(c[n] for n in ("query", "key", "value", "positions", "sources", "is_causal")),
                c["scale"],
                r,
                s,
            )
            self.ok = self.ok and state_right(state, want)
        elif args["out"] is not None or args["lse"] is not None:
            raise Violation("step 0 starts from the empty state (out and lse null)")
        self.next = (r + 1, 0) if s == self.P else (r, s + 1)
        if s == self.P:
            return {}
        kp = np.asarray(c["positions"][int(c["sources"][r, s])])
        return {
            "key": to_wire(torch.as_tensor(np.asarray(c["key"])[..., kp, :])),
            "value": to_wire(torch.as_tensor(np.asarray(c["value"])[..., kp, :])),
        }

    def judged(self, outputs: list) -> list:
        """(out, lse, whether every rank ran its whole ring with every state right)."""
        return [*outputs[:2], np.array(bool(self.ok and self.next == (self.P, 0)))]


def serve_ring(case: dict) -> RingService:
    return RingService(case)
