"""Chapter 19's driver, run in the CHILD: every rank's ring, step by step, through the learner's
``ring_step``, with the key/value blocks handed over by the PARENT's ring
(``oracles.ring.RingService``) one at a time, and the JSON wire format of the states and blocks
exchanged on that channel (:func:`to_wire`, :func:`from_wire`). Items name it through
:mod:`mha_course.grading.child.drivers`.
"""

from __future__ import annotations

import math

import torch

from mha_grader.sandbox import channel


def drive_ring(fn, query, key, value, positions, sources, is_causal, scale):
    """Runs in the CHILD: every rank's ring, step by step, through the learner's ``ring_step``.

    ``positions[r]`` are the sequence positions rank r holds, ``sources[r, s]`` the rank whose
    key/value block it holds at step s; ``scale`` multiplies the scores (every step is handed it).
    The running state starts empty (out 0, lse -inf).

    The keys and values are HIDDEN (``None`` here): the PARENT holds the ring
    (``oracles.ring.RingService``) and hands this process one key/value block at a time, in
    ring order, each only after the state the step before produced (which it checks), as the
    block would arrive from the neighbour rank. So no frame of this process holds the whole
    sequence's keys and values for a step to read, and a step must merge what it was given.

    Shape:
        query: (B, H, T, D). Returns out (B, H, T, Dv), lse (B, H, T) (the parent appends
        whether every intermediate state was right).
    """
    ring = channel.client()
    P, scale = positions.shape[0], float(scale)
    parts = {}
    for r in range(P):
        qp = positions[r]
        state = None  # empty: the first block defines Dv
        for s in range(P + 1):
            got = ring.call(
                "block",
                rank=r,
                step=s,
                out=None if state is None else to_wire(state[0]),
                lse=None if state is None else to_wire(state[1]),
            )
            if s == P:
                break
            k = torch.tensor(from_wire(got["key"]), dtype=query.dtype)
            v = torch.tensor(from_wire(got["value"]), dtype=query.dtype)
            if state is None:
                state = (
                    query.new_zeros(*query.shape[:-2], len(qp), v.shape[-1]),  # (B, H, T/P, Dv)
                    query.new_full((*query.shape[:-2], len(qp)), float("-inf")),
                )  # (B, H, T/P)
            kp = positions[int(sources[r, s])]
            state = fn(
                state[0],
                state[1],
                query[..., qp, :].clone(),
                k,
                v,
                qp.clone(),
                kp.clone(),
                bool(is_causal),
                scale,
            )
        parts[r] = state
    return assemble_ring(query, positions, parts)


def assemble_ring(query, positions, parts):
    """Each rank's final (out, lse) put back at its positions: (B, H, T, Dv), (B, H, T)."""
    dv = parts[0][0].shape[-1]
    out_all = query.new_zeros(*query.shape[:-1], dv)
    lse_all = query.new_zeros(query.shape[:-1])
    for r, (out, lse) in parts.items():
        out_all[..., positions[r], :], lse_all[..., positions[r]] = out, lse
    return out_all, lse_all


_SPECIAL = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def to_wire(t) -> list:
    """A tensor as nested JSON lists; non-finite numbers as the strings "inf", "-inf", "nan"
    (the channel's JSON has no such constants)."""

    def enc(x):
        if isinstance(x, list):
            return [enc(y) for y in x]
        return x if math.isfinite(x) else ("nan" if x != x else ("inf" if x > 0 else "-inf"))

    return enc(torch.as_tensor(t).detach().double().tolist())


def from_wire(x):
    """``to_wire``'s lists back to nested lists of floats; ``ValueError`` on anything else."""
    if isinstance(x, list):
        return [from_wire(y) for y in x]
    if isinstance(x, str) and x in _SPECIAL:
        return _SPECIAL[x]
    if type(x) in (int, float):
        return float(x)
    raise ValueError(f"expected a number or one of {sorted(_SPECIAL)}, got {type(x).__name__}")
