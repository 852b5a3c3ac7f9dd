"""Chapter 19: run :func:`~mha_course.kernels.ring.ring_attention` on P local processes.

``torch.multiprocessing`` starts P fresh Python processes (``spawn``), each joins one gloo
process group over TCP on 127.0.0.1 (NCCL when the inputs are CUDA tensors and there is one GPU
per rank: rank r works on ``cuda:r``), gets its shard of the inputs, runs the ring and sends back
its part of the output, the per-step counts and its peak tensor memory. The same code runs under
``torchrun`` across machines; here it needs no setup.

The jobs are checked in the parent before anything is spawned, and while it waits the parent
polls the ranks' exit codes: a rank that raises is reported with its traceback and the other
ranks are stopped (they would otherwise wait for it in a receive, for gloo's 30 minutes).
"""

from __future__ import annotations

import functools
import os
import queue
import socket
import sys
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mha_course._checks import check_positive_int, check_qkv, shape_str
from mha_course.device import peak_memory_bytes
from mha_course.kernels.ring import _chunk_len, ring_attention, shard, unshard

POLL_SECONDS = 0.2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, jobs, measure_memory, backend, results):
    torch.set_num_threads(1)  # P processes share the machine's cores
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)  # NCCL (batch_isend_irecv especially) needs it set
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        for n, job in enumerate(jobs):
            layout = job.get("layout", "contiguous")
            # (..., T, D) -> this rank's (..., T/P, D), on this rank's device
            q, k, v = (
                shard(job[x], rank, world_size, layout).to(device)
                for x in ("query", "key", "value")
            )
            stats: dict = {}
            run = functools.partial(
                ring_attention,
                q,
                k,
                v,
                is_causal=job.get("is_causal", False),
                layout=layout,
                stats=stats,
            )
            out = run()
            peak = peak_memory_bytes(run) if job.get("measure_memory", measure_memory) else None
            # A NumPy copy travels by value (a torch tensor would travel as shared memory, freed
            # when this process ends, maybe before the parent reads it).
            results.put(("ok", n, rank, out.cpu().numpy(), stats, peak))
    finally:
        dist.destroy_process_group()


def _reporting(target: Callable, rank: int, *args) -> None:
    """Run ``target(rank, *args)``; on an exception, send its traceback to the parent (the
    queue is the last of ``args``) before exiting with an error."""
    try:
        target(rank, *args)
    except BaseException:
        args[-1].put(("error", rank, traceback.format_exc()))
        raise


def _run_ranks(target: Callable, world_size: int, args: tuple, expected: int) -> list[tuple]:
    """Spawn ``target(rank, world_size, *args, results)`` on ``world_size`` processes and collect
    ``expected`` ``("ok", ...)`` messages from ``results``, polling the ranks while waiting: a
    rank that raises or dies raises ``RuntimeError`` here (with its traceback) and the other
    ranks are terminated. ``target`` must be importable by name (``spawn`` pickles it)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_reporting, args=(target, r, world_size, *args, results))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    got: list[tuple] = []
    try:
        while len(got) < expected:
            try:
                msg = results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead:
                    _raise_failed(dead, results)
                if all(p.exitcode == 0 for p in procs) and results.empty():
                    raise RuntimeError(
                        f"ring ranks: all {world_size} exited, but only {len(got)} "
                        f"of {expected} results came back"
                    ) from None
                continue
            if msg[0] == "error":
                raise RuntimeError(f"ring rank {msg[1]} raised:\n{msg[2]}")
            got.append(msg[1:])
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    return got


def _raise_failed(dead: list[tuple[int, int]], results) -> None:
    """A rank exited with an error: report its traceback if it sent one."""
    try:
        msg = results.get(timeout=2.0)  # the dying rank's traceback may still be in the pipe
        if msg[0] == "error":
            raise RuntimeError(f"ring rank {msg[1]} raised:\n{msg[2]}")
    except queue.Empty:
        pass
    codes = ", ".join(f"rank {r} with code {c}" for r, c in dead)
    raise RuntimeError(f"ring ranks exited with an error: {codes} (its output is above)")


def _check_jobs(jobs: object, world_size: int) -> str:
    """Every job is valid before any process starts; returns the device kind ("cpu"/"cuda")."""
    if not isinstance(jobs, (list, tuple)) or not jobs:
        raise ValueError(
            f"jobs: expected a non-empty list of dicts with query, key, value, got {jobs!r:.80}"
        )
    kinds = set()
    for n, job in enumerate(jobs):
        if not isinstance(job, dict) or not {"query", "key", "value"} <= set(job):
            raise ValueError(
                f"jobs[{n}]: expected a dict with 'query', 'key', 'value', got "
                f"{type(job).__name__} {sorted(job) if isinstance(job, dict) else ''}"
            )
        q, k, v = job["query"], job["key"], job["value"]
        check_qkv(q, k, v)
        if k.shape[:-1] != q.shape[:-1]:
            raise ValueError(
                f"jobs[{n}] key: expected shape (..., T, D) with the leading sizes and "
                f"T of query {shape_str(q)} (one sequence split over the ranks), got "
                f"{shape_str(k)}"
            )
        _chunk_len(q.shape[-2], world_size, job.get("layout", "contiguous"))
        kinds |= {t.device.type for t in (q, k, v)}
    if len(kinds) > 1 or not kinds <= {"cpu", "cuda"}:
        raise ValueError(
            f"jobs: expected every tensor on the CPU or every one on CUDA, got {sorted(kinds)}"
        )
    return kinds.pop()


def _backend(kind: str, world_size: int) -> str:
    """NCCL for CUDA inputs with one GPU per rank; otherwise gloo (saying why, for CUDA inputs)."""
    if kind != "cuda":
        return "gloo"
    if world_size <= torch.cuda.device_count():
        return "nccl"
    print(
        f"run_ring: {world_size} ranks but {torch.cuda.device_count()} GPU(s); NCCL needs one "
        f"GPU per rank, so the ring runs over gloo on the CPU",
        file=sys.stderr,
    )
    return "gloo"


def run_ring(jobs: list[dict], world_size: int, measure_memory: bool = False) -> list[dict]:
    """Run each job (``query``, ``key``, ``value`` full tensors; optional ``is_causal``,
    ``layout``, ``measure_memory``) as ring attention over ``world_size`` spawned processes, all jobs in one start.

    CPU tensors run over gloo. CUDA tensors run over NCCL with rank r on ``cuda:r`` when there
    are at least ``world_size`` GPUs; with fewer, NCCL cannot run (one GPU per rank), so the
    ring runs over gloo on the CPU and says so on stderr.

    Returns, per job, ``out`` (the full output, reassembled in sequence order, on the CPU), and
    per rank ``bytes_sent`` and ``scores_computed`` (lists over steps) and ``peak_bytes`` (or None).

    Shape:
        query: (..., T, D); key: (..., T, D); value: (..., T, Dv). out: (..., T, Dv).
    """
    check_positive_int("world_size", world_size, "P (ranks)")
    kind = _check_jobs(jobs, world_size)
    backend = _backend(kind, world_size)
    # Full tensors travel to the children on the CPU (no CUDA IPC); each rank moves its shard.
    jobs = [
        {**job, **{x: job[x].detach().cpu() for x in ("query", "key", "value")}} for job in jobs
    ]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # stay on the loopback interface
    got = _run_ranks(
        _worker,
        world_size,
        (_free_port(), jobs, measure_memory, backend),
        expected=len(jobs) * world_size,
    )
    out = []
    for n, job in enumerate(jobs):
        mine = sorted((g for g in got if g[0] == n), key=lambda g: g[1])
        out.append(
            {
                "out": unshard(
                    [torch.from_numpy(g[2]) for g in mine], job.get("layout", "contiguous")
                ),
                "bytes_sent": [g[3]["bytes_sent"] for g in mine],
                "scores_computed": [g[3]["scores_computed"] for g in mine],
                "peak_bytes": [g[4] for g in mine],
            }
        )
    return out
