"""Chapter 8: the timing harness, the stamp, the results schema and the decision logic, on CPU."""

import copy
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_course import MultiHeadAttention
from mha_course.benchmark import (
    CPU_BANNER,
    classify_failure,
    committed_results,
    environment_stamp,
    labels,
    load_results,
    loglog_slope,
    round_ratios,
    run_benchmark,
    summarize,
    time_interleaved,
    validate_results,
    write_results,
)
from mha_course.benchmark import runner as runner_module
from mha_course.benchmark.backends import forced_sdpa
from mha_course.benchmark.decode import kv_head_choices
from mha_course.benchmark.plots import save_plots
from mha_course.benchmark.sweep import fitted_slopes
from mha_course.benchmark.targets import evaluate_gpu_targets, ratio_row
from mha_course.benchmark.variants import Problem, bare_attention, bare_sdpa_with_projections


def test_summarize_matches_numpy_quartiles_and_ignores_order():
    xs = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 7.0]
    s = summarize(xs)
    q1, q3 = np.percentile(xs, [25, 75])
    assert s["ms_median"] == statistics.median(xs)
    assert s["ms_q1"] == pytest.approx(q1) and s["ms_q3"] == pytest.approx(q3)
    assert s["ms_iqr"] == pytest.approx(q3 - q1) and s["n_samples"] == len(xs)
    assert summarize(list(reversed(xs))) == s
    assert summarize([2.5])["ms_iqr"] == 0.0
    with pytest.raises(ValueError, match="samples_ms"):
        summarize([])


def test_round_ratios_take_the_median_of_each_rounds_ratio_not_the_ratio_of_medians():
    # round 3 ran under load for both: per round the numerator is 2x; the medians' ratio says 1.5x
    num = {"status": "ok", "rounds_ms": [2.0, 2.0, 30.0, 3.0], "ms_median": 2.5}
    den = {"status": "ok", "rounds_ms": [1.0, 1.0, 15.0, 1.5], "ms_median": 1.25 * 4 / 3}
    rr = round_ratios(num, den)
    assert rr["median"] == 2.0 and rr["ratios"] == [2.0, 2.0, 2.0, 2.0]
    assert rr["q1"] == rr["q3"] == 2.0
    row = ratio_row("x", num | {"ms_q1": 2.0, "ms_q3": 9.75}, den | {"ms_q1": 1, "ms_q3": 5}, 2.0)
    assert row["ratio"] == 2.0 and row["ratio_of"] == "median of per-round ratios" and row["met"]
    for bad in ({"rounds_ms": [1.0]}, {}):
        with pytest.raises(ValueError, match="num, den: expected two results of one"):
            round_ratios(num, bad)


def test_time_interleaved_keeps_each_rounds_sample_in_round_order():
    res = time_interleaved({"a": lambda: None, "b": lambda: None}, rounds=4, min_block_s=0.0)
    assert all(len(r["rounds_ms"]) == 4 for r in res.values())
    assert sorted(res["a"]["rounds_ms"]) == res["a"]["samples_ms"]
    assert len(round_ratios(res["a"], res["b"])["ratios"]) == 4


def test_time_interleaved_ranks_a_slow_call_above_a_fast_one():
    res = time_interleaved(
        {"sleep 3 ms": lambda: time.sleep(0.003), "noop": lambda: None},
        rounds=3,
        warmup=1,
        min_block_s=0.003,
    )
    assert set(res) == {"sleep 3 ms", "noop"}
    assert all(r["status"] == "ok" and r["n_samples"] == 3 for r in res.values())
    assert res["sleep 3 ms"]["ms_median"] >= 3.0 > res["noop"]["ms_median"]
    assert (
        res["sleep 3 ms"]["ms_q1"] <= res["sleep 3 ms"]["ms_median"] <= res["sleep 3 ms"]["ms_q3"]
    )


def test_warm_up_keeps_first_call_cost_out_of_the_samples():
    calls = []

    def slow_first_call():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.3)  # e.g. allocation, autotuning or compilation on the first call

    res = time_interleaved({"f": slow_first_call}, rounds=3, warmup=1, min_block_s=0.0)
    assert res["f"]["ms_median"] < 100 and len(calls) >= 4
    assert res["f"]["first_call_ms"] >= 300  # reported, separately


def test_failures_are_reported_not_raised():
    q = torch.randn(1, 2, 8, 4)

    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    res = time_interleaved(
        {
            "efficient on CPU": forced_sdpa("efficient", q, q, q),
            "oom": oom,
            "bug": lambda: 1 / 0,
            "ok": lambda: None,
        },
        rounds=1,
    )
    assert res["efficient on CPU"]["status"] == "unsupported"
    assert res["oom"]["status"] == "oom" and "out of memory" in res["oom"]["reason"]
    assert res["bug"]["status"] == "error" and "ZeroDivisionError" in res["bug"]["reason"]
    assert res["ok"]["status"] == "ok"
    assert classify_failure(NotImplementedError("flex"))[0] == "unsupported"
    flaky = iter([None] * 5)  # the warm-up calls succeed, a later (timed) call runs out of memory

    def fails_later():
        if next(flaky, "oom") == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory (fragmentation)")

    late = time_interleaved(
        {"late oom": fails_later, "ok": lambda: None}, rounds=3, min_block_s=0.0
    )
    assert late["late oom"]["status"] == "oom" and late["ok"]["n_samples"] == 3
    with pytest.raises(ValueError, match="rounds"):
        time_interleaved({"ok": lambda: None}, rounds=0)


def test_bare_baselines_match_torch_in_float64():
    q, k, v = (torch.randn(2, 3, 6, 4, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        torch.testing.assert_close(
            bare_attention(q, k, v, causal),
            F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        )
    m = MultiHeadAttention(8, 2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(bare_sdpa_with_projections(m, x, True), m(x, is_causal=True)[0])


def test_loglog_slope_recovers_the_exponent():
    xs = [128, 256, 512, 1024]
    assert loglog_slope(xs, [3e-6 * x**2 for x in xs]) == pytest.approx(2.0)
    rows = [{"variant": "v", "L": x, "ms_median": 1 + 1e-5 * x**2, "status": "ok"} for x in xs * 2]
    assert 1.0 < fitted_slopes(rows)["v"] < 2.0  # a fixed overhead bends the small-L end
    with pytest.raises(ValueError, match="xs, ys"):
        loglog_slope([1.0], [1.0])


def test_stamp_names_the_machine_and_versions():
    s = environment_stamp("cpu", threads=3)
    assert s["device_type"] == "cpu" and s["threads"] == 3 and s["torch"] == torch.__version__
    assert s["device_name"] and s["cpu_model"] and s["date_utc"].endswith("Z")
    assert s["cuda"] == torch.version.cuda


TINY = runner_module.Config(
    Problem(1, 16, 16, 2, dtype=torch.float32),
    False,
    dict(B=1, L=16, E=16, H=4),
    dict(B=1, H=4, D=8, contexts=[16, 64]),
    dict(B=1, H=2, D=8, lengths=[16, 32, 64]),
    dict(rounds=2, warmup=1, min_block_s=0.0),
)


@pytest.fixture(scope="module")
def tiny_results():
    saved = runner_module.config_for
    runner_module.config_for = lambda device, quick: TINY
    try:
        return run_benchmark("cpu", quick=True, log=lambda s: None)
    finally:
        runner_module.config_for = saved


def test_cpu_run_is_stamped_bannered_and_valid(tiny_results):
    r = tiny_results
    validate_results(r)
    assert r["banner"] == CPU_BANNER and "not comparable to GPU" in r["banner"]
    rows = {row["variant"]: row for row in r["comparison"]["rows"]}
    assert rows[labels.sdpa_forced("efficient")]["status"] == "unsupported"  # no such kernel on CPU
    ok = [row for row in rows.values() if row["status"] == "ok"]
    assert len(ok) >= 8
    for row in ok:
        assert row["max_abs_err"] < 1e-5, row["variant"]
        assert row["gflops_per_s"] > 0 and "pct_of_peak" not in row and "gb_per_s" not in row
    assert {row["variant"] for row in r["decode"]["rows"]} == set(kv_head_choices(4))


def test_validation_rejects_untraceable_results(tiny_results):
    for breaking, message in [
        (lambda r: r.pop("banner"), "banner"),
        (lambda r: r["stamp"].pop("torch"), "stamp"),
        (lambda r: r["decode"]["rows"][0].update(gb_per_s=1.0), "GFLOP/s only"),
        (lambda r: r["sweep"]["rows"][0].update(status="fast"), "status"),
        (lambda r: r["comparison"]["rows"][0].pop("ms_iqr"), "ms_iqr"),
        (lambda r: r.update(schema="v0"), "schema"),
    ]:
        broken = copy.deepcopy(tiny_results)
        breaking(broken)
        with pytest.raises(ValueError, match=message):
            validate_results(broken)


def test_results_round_trip_and_committed_gpu_files(tiny_results, tmp_path):
    path = write_results(tiny_results, tmp_path / "cpu.json")
    assert load_results(path) == json.loads(json.dumps(tiny_results))
    (tmp_path / "junk.json").write_text("{}")
    assert committed_results(tmp_path, "cuda") == []  # CPU files and junk are not GPU results
    assert [p.name for p, _ in committed_results(tmp_path, "cpu")] == ["cpu.json"]
    pngs = save_plots(tiny_results, tmp_path, "cpu")
    assert [p.name for p in pngs] == ["cpu_comparison.png", "cpu_sweep.png", "cpu_decode.png"]
    assert all(p.stat().st_size > 1000 for p in pngs)


def test_gpu_targets_do_not_apply_to_cpu_results_and_decide_on_gpu_ones(tiny_results):
    cpu = evaluate_gpu_targets(tiny_results)
    assert [t["met"] for t in cpu] == [None, None, None]
    gpu = copy.deepcopy(tiny_results)
    gpu["stamp"]["device_type"] = "cuda"
    gpu["decode"]["rows"] = [
        {"variant": labels.MHA, "S": 8192, "H": 32, "G": 32, "status": "ok", "ms_median": 1.0},
        {"variant": labels.gqa(8), "S": 8192, "H": 32, "G": 8, "status": "ok", "ms_median": 0.3},
    ]
    decode = evaluate_gpu_targets(gpu)[2]
    assert decode["goal"] == pytest.approx(3.2) and decode["ratio"] == pytest.approx(1 / 0.3)
    assert decode["met"] is True
    gpu["decode"]["rows"][1]["ms_median"] = 0.5
    assert evaluate_gpu_targets(gpu)[2]["met"] is False
    row = ratio_row(
        "x",
        {"status": "ok", "ms_median": 2.0, "ms_q1": 1.5, "ms_q3": 2.5},
        {"status": "ok", "ms_median": 4.0, "ms_q1": 3.0, "ms_q3": 5.0},
        0.9,
    )
    assert row["ratio"] == 0.5 and row["met"] and row["ratio_range"] == (0.3, 2.5 / 3.0)
    assert row["ratio_of"] == "ratio of medians"  # a result read back without its rounds
    assert ratio_row("x", {"status": "oom"}, {"status": "ok"}, 1.0)["met"] is None


def test_cli_refuses_cuda_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = subprocess.run(
        [sys.executable, "-m", "mha_course.cli", "bench", "--device", "cuda"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "no CUDA device" in out.stdout
