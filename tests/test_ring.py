"""Chapter 19: ring attention over P spawned gloo processes equals one-process attention
(float64), causal and not, contiguous and zig-zag; work and communication counted."""

import pytest
import torch

from mha_course import scaled_dot_product_attention
from mha_course.kernels.ring import shard, unshard, work_per_rank
from mha_course.kernels.ring_run import run_ring

B, H, T, D = 2, 3, 16, 4
CONFIGS = [(c, layout) for c in (False, True) for layout in ("contiguous", "zigzag")]


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.fixture(scope="module", params=[2, 4], ids=lambda p: f"P{p}")
def ring(request):
    """All four configurations in one start of P processes (starting them is the slow part)."""
    q, k, v = _qkv()
    jobs = [dict(query=q, key=k, value=v, is_causal=c, layout=lay) for c, lay in CONFIGS]
    return request.param, (q, k, v), run_ring(jobs, request.param)


@pytest.mark.parametrize(
    "n", range(len(CONFIGS)), ids=[f"{'causal' if c else 'full'}-{lay}" for c, lay in CONFIGS]
)
def test_equals_single_process(ring, n):
    P, (q, k, v), results = ring
    is_causal, layout = CONFIGS[n]
    ref = scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(results[n]["out"], ref, rtol=1e-12, atol=1e-12)


def test_communication_per_step(ring):
    P, _, results = ring
    block_bytes = 2 * B * H * (T // P) * D * 8  # one key and one value block, float64
    for r in results:
        assert r["bytes_sent"] == [[block_bytes] * (P - 1) + [0]] * P  # P - 1 sends per rank


def test_work_counted_by_the_ring_matches_work_per_rank(ring):
    P, _, results = ring
    for (is_causal, layout), r in zip(CONFIGS, results):
        counted = [list(s) for s in zip(*r["scores_computed"])]  # [rank][step] -> [step][rank]
        assert counted == work_per_rank(P, layout, is_causal, T=T)


def test_zigzag_balances_causal_work():
    P = 4
    contiguous, zigzag = work_per_rank(P, "contiguous"), work_per_rank(P, "zigzag")
    per_rank = lambda w: [sum(s[r] for s in w) for r in range(P)]  # noqa: E731
    assert per_rank(contiguous) == [4, 8, 12, 16]  # chunk units (T = 2P): rank r does r + 1 blocks
    assert per_rank(zigzag) == [9, 9, 9, 9]  # 2P + 1 chunks each
    critical = lambda w: sum(max(s) for s in w)  # noqa: E731
    assert (critical(contiguous), critical(zigzag)) == (16, 9)  # contiguous gains nothing
    assert critical(work_per_rank(P, "contiguous", is_causal=False)) == 16


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_shard_unshard_round_trip(layout):
    x = torch.arange(2 * 24 * 3.0).reshape(2, 24, 3)
    parts = [shard(x, r, 3, layout) for r in range(3)]
    assert all(p.shape == (2, 8, 3) for p in parts)
    torch.testing.assert_close(unshard(parts, layout), x)
    if layout == "zigzag":  # rank 0 holds chunks 0 and 5 of 6
        assert shard(x, 0, 3, layout)[0, :, 0].tolist() == [0, 3, 6, 9, 60, 63, 66, 69]


def test_bad_length_names_argument():
    with pytest.raises(ValueError, match="T: the sequence length must be a multiple of 8"):
        shard(torch.zeros(1, 12, 2), 0, 4, "zigzag")
    with pytest.raises(ValueError, match="layout"):
        shard(torch.zeros(1, 12, 2), 0, 4, "striped")


def _rank_1_raises(rank, world_size, port, results):
    """Rank 1 raises; rank 0 waits in a receive from it (gloo would wait 30 minutes)."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    if rank == 1:
        raise ValueError("rank 1 failed on purpose")
    dist.recv(torch.zeros(1), src=1)


def test_a_failing_rank_is_reported_not_waited_for():
    import time

    from mha_course.kernels.ring_run import _free_port, _run_ranks

    start = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"(?s)ring rank 1 raised.*rank 1 failed on purpose"):
        _run_ranks(_rank_1_raises, 2, (_free_port(),), expected=2)
    assert time.perf_counter() - start < 60  # seconds: polled, not the collective's timeout


@pytest.mark.parametrize(
    "jobs, P, words",
    [
        ([], 2, ["jobs", "non-empty"]),
        (
            [
                dict(
                    query=torch.zeros(1, 6, 4), key=torch.zeros(1, 6, 4), value=torch.zeros(1, 6, 4)
                )
            ],
            4,
            ["T", "multiple of 4", "T = 6"],
        ),
        (
            [
                dict(
                    query=torch.zeros(1, 8, 4), key=torch.zeros(1, 4, 4), value=torch.zeros(1, 4, 4)
                )
            ],
            2,
            ["jobs[0] key", "(..., T, D)", "(1, 4, 4)"],
        ),
        ([dict(query=torch.zeros(1, 8, 4))], 2, ["jobs[0]", "'key'"]),
        (
            [
                dict(
                    query=torch.zeros(1, 8, 4), key=torch.zeros(1, 8, 4), value=torch.zeros(1, 8, 4)
                )
            ],
            0,
            ["world_size", "positive int", "0"],
        ),
        (
            [
                dict(
                    query=torch.zeros(1, 8, 4),
                    key=torch.zeros(1, 8, 4),
                    value=torch.zeros(1, 8, 4),
                    layout="zz",
                )
            ],
            2,
            ["layout", "'zz'"],
        ),
    ],
)
def test_run_ring_refuses_bad_jobs_before_spawning(jobs, P, words, monkeypatch):
    import mha_course.kernels.ring_run as rr

    monkeypatch.setattr(rr, "_run_ranks", lambda *a, **k: pytest.fail("spawned before checking"))
    with pytest.raises(ValueError) as info:
        run_ring(jobs, P)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_backend_nccl_with_one_gpu_per_rank_else_gloo_with_a_message(monkeypatch, capsys):
    import mha_course.kernels.ring_run as rr

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert rr._backend("cpu", 4) == "gloo" and capsys.readouterr().err == ""
    assert rr._backend("cuda", 2) == "nccl"
    assert rr._backend("cuda", 4) == "gloo"
    assert "4 ranks but 2 GPU(s)" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs 2 GPUs (one per rank)")
def test_nccl_ring_equals_single_process():
    q, k, v = (x.float().cuda() for x in _qkv())
    out = run_ring([dict(query=q, key=k, value=v, is_causal=True, layout="zigzag")], 2)[0]["out"]
    ref = scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), is_causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
