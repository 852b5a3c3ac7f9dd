"""Chapter 19: run :func:`~mha_course.ring.ring_attention` on P local processes.

``torch.multiprocessing`` starts P fresh Python processes (``spawn``), each joins one gloo
process group over TCP on 127.0.0.1 (NCCL on CUDA tensors, one GPU per rank), gets its shard of
the inputs, runs the ring and sends back its part of the output, the per-step counts and its peak
tensor memory. The same code runs under ``torchrun`` across machines; here it needs no setup.
"""

from __future__ import annotations

import functools
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .benchmark.memory import peak_memory_bytes
from .ring import ring_attention, shard, unshard


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, jobs, results, measure_memory):
    torch.set_num_threads(1)  # P processes share the machine's cores
    cuda = jobs[0]["query"].is_cuda
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size)
    try:
        for n, job in enumerate(jobs):
            layout = job.get("layout", "contiguous")
            q, k, v = (shard(job[x], rank, world_size, layout) for x in ("query", "key", "value"))
            stats: dict = {}
            run = functools.partial(ring_attention, q, k, v, is_causal=job.get("is_causal", False),
                                    layout=layout, stats=stats)
            out = run()
            peak = peak_memory_bytes(run) if job.get("measure_memory", measure_memory) else None
            # A NumPy copy travels by value (a torch tensor would travel as shared memory, freed
            # when this process ends, maybe before the parent reads it).
            results.put((n, rank, out.cpu().numpy(), stats, peak))
    finally:
        dist.destroy_process_group()


def run_ring(jobs: list[dict], world_size: int, measure_memory: bool = False) -> list[dict]:
    """Run each job (``query``, ``key``, ``value`` full tensors; optional ``is_causal``,
    ``layout``, ``measure_memory``) as ring attention over ``world_size`` spawned processes, all jobs in one start.

    Returns, per job, ``out`` (the full output, reassembled in sequence order), and per rank
    ``bytes_sent`` and ``scores_computed`` (lists over steps) and ``peak_bytes`` (or None).

    Shape:
        query: (..., T, D); key: (..., T, D); value: (..., T, Dv). out: (..., T, Dv).
    """
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # stay on the loopback interface
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, jobs, results, measure_memory))
             for port in [_free_port()] for r in range(world_size)]
    for p in procs:
        p.start()
    got = [results.get() for _ in range(len(jobs) * world_size)]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a ring rank exited with code {p.exitcode}")
    out = []
    for n, job in enumerate(jobs):
        mine = sorted((g for g in got if g[0] == n), key=lambda g: g[1])
        out.append({
            "out": unshard([torch.from_numpy(g[2]) for g in mine], job.get("layout", "contiguous")),
            "bytes_sent": [g[3]["bytes_sent"] for g in mine],
            "scores_computed": [g[3]["scores_computed"] for g in mine],
            "peak_bytes": [g[4] for g in mine],
        })
    return out
