"""The readers behind chapters 14 and 16's evidence cells (issue 32): bytes, shares and bounds
computed as the lecture states them, and a wrong file or name refused with a message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mha_course.experiments import kv_quant_report as kvr
from mha_course.experiments import sink_report as sr

ROOT_RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_scheme_bytes_count_codes_and_fp16_scales():
    # int4 per token: 16 bytes of codes + one fp16 scale, for a key and a value
    assert kvr.scheme_bytes("int4 token", 32) == 2 * (16 + 2)
    # KIVI int2, keys per channel in groups of 16: 8 + 2·2·32/16 = 16; values 8 + 4
    assert kvr.scheme_bytes("KIVI int2", 32) == 16 + 12
    # per channel over the 64-position window: 32/64 scales per token
    assert kvr.scheme_bytes("int4 K channel", 32) == 16 + 1 + 18
    assert kvr.scheme_bytes("fp8 head", 128) == 256


def test_read_bytes_mixes_fp16_residual_and_codes():
    for s in ("KIVI int2", "int4 token +residual"):
        assert kvr.read_bytes(s, 32, 0.0, 0.0) == kvr.scheme_bytes(s, 32)
        assert kvr.read_bytes(s, 32, 1.0, 1.0) == 4 * 32
    half = kvr.read_bytes("int4 token", 32, 0.5, 0.5)
    assert half == pytest.approx((4 * 32 + 36) / 2)
    with pytest.raises(ValueError, match="share_k, share_v: expected shares in"):
        kvr.read_bytes("int4 token", 32, 1.5, 0.0)
    with pytest.raises(ValueError, match="scheme: expected one of"):
        kvr.scheme_bytes("int3", 32)


def test_kv_quant_report_reads_the_committed_file():
    kq = kvr.load()
    names = list(kq["models"])
    assert len(kvr.across_models(kq, "KIVI int2")) == len(names)
    assert len(kvr.across_models(kq, "KIVI int2 - int4 token +residual")) == len(names)
    with pytest.raises(ValueError, match="name: expected a scheme or contrast"):
        kvr.across_models(kq, "int9 token")
    for table in (kvr.axis_table(kq), kvr.scheme_table(kq), kvr.residual_table(kq, 0.38, 0.59)):
        assert all(n in table or n[5:8] in table for n in names)
    assert "KIVI int2" in kvr.scheme_table(kq).splitlines()[-2]


def test_a_results_file_of_another_experiment_is_refused(tmp_path):
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"schema": "mha-course-ch14-sinks/1"}))
    with pytest.raises(ValueError, match="path: expected a results file with schema"):
        kvr.load(other)
    with pytest.raises(ValueError, match="path: expected a results file with schema"):
        sr.load_long_context(other)


def _diff(mean: float) -> dict:
    return {"mean": mean, "se": 0.001, "ci95": [mean - 0.002, mean + 0.002]}


def test_renumbering_share_and_text_position_penalty():
    sinks = {
        "rope": {
            "sizes": [16],
            "S=16": {"renumbered_minus_window": _diff(0.01), "absolute_minus_window": _diff(0.08)},
        }
    }
    assert sr.renumbering_share(sinks) == [pytest.approx(1 - 0.01 / 0.08)]
    lc = {
        "num_sink": 4,
        "cache_sizes": [16],
        "losses": {"window 16": {"past": 2.0}, "window 12 + 4 sinks": {"past": 2.25}},
    }
    assert sr.text_position_penalty(lc) == {16: 0.25}


def test_excess_bounds_take_two_standard_errors_over_heads():
    def summary(mean):
        return {"mean": mean, "se": [[0.01, 0.02]]}

    sinks = {"excess": {"m": summary([[-0.3, -0.1]])}, "excess_raw": {"m": summary([[0.05, 0.02]])}}
    b = sr.excess_bounds(sinks)["m"]
    assert b["relative_top"] == pytest.approx(-0.1 + 0.04)
    assert b["raw_top"] == pytest.approx(0.05 + 0.02)
    assert b["raw_bottom"] == pytest.approx(0.02 - 0.04)


def test_sink_report_reads_the_committed_files():
    sk, lc = sr.load_sinks(), sr.load_long_context()
    assert len(sr.across_models(sk, 8, "sinks_minus_wider")) == len(sk["learned"])
    with pytest.raises(ValueError, match="window, name: expected a window and difference"):
        sr.across_models(sk, 7, "sinks_minus_wider")
    full, others = sr.per_block(lc)
    assert len(full) == lc["length"] // lc["context_length"] and "full" not in others
    assert sr.window_table(sk).count("full cache") == len(sk["learned"])
    assert len(sr.excess_table(sk).splitlines()) == 2 * len(sk["excess"])
    assert "renumbering removes" in sr.renumbered_table(sk)
    assert "window 60 + 4 sinks" in sr.long_context_table(lc)


def test_survivor_population_scores_every_pair_once():
    from mha_course.analysis.random_orders import percentile_in, survivor_population

    seen = []

    def score(mask):
        seen.append(tuple(mask.flatten().nonzero().flatten().tolist()))
        return float(mask[0].sum())  # how many kept heads sit in layer 0

    pop = survivor_population(score, layers=2, heads=3, keep=2)
    assert len(pop) == 15 and len(set(seen)) == 15 and all(len(k) == 2 for k in seen)
    assert sorted(pop.tolist()).count(2.0) == 3  # C(3, 2) pairs inside layer 0
    assert percentile_in(2.0, pop) == pytest.approx((12 + 0.5 * 3) / 15)
    with pytest.raises(ValueError, match="keep: expected at most"):
        survivor_population(score, 1, 2, keep=3)
    with pytest.raises(ValueError, match="population: expected a non-empty 1-D array"):
        percentile_in(0.5, pop[:0])


def test_head_removal_report_counts_heads_within_a_budget():
    from mha_course.experiments import head_removal_report as hrr

    curve = [1.0, 1.005, 1.02, 1.2]  # perplexity +0.5 %, +2 %, +22 % after 1, 2, 3 heads
    assert hrr.most_removed(curve, 1.0, 0.01) == 1 and hrr.most_removed(curve, 1.0, 0.05) == 2
    with pytest.raises(ValueError, match="tolerance: expected a share >= 0"):
        hrr.most_removed(curve, 1.0, -0.1)
    hr = json.loads((ROOT_RESULTS / "ch13_head_removal.json").read_text())
    counts = hrr.heads_within(hr, 0.10)
    assert set(counts) == {"importance", "single_removal", "greedy", "random median"}
    first, ends, share = hrr.curve_windows(hr, 240)
    assert first == 240 * hr["context_length"] and 0 < share <= 1 and ends[-1] == hr["val_chars"]
    assert "retraining:" in hrr.pruning_text(hr) and "per validation file" in hrr.loss_table(hr)


def test_induction_report_summarises_every_seed():
    from mha_course.experiments import induction_report as ir
    from mha_course.experiments.induction_formation import load_results

    ind = load_results()
    s, ab = ir.formation_summary(ind), ir.ablation(ind)
    n = len(ind["curves"])
    assert len(s["together"]) == len(s["prev_first"]) == len(s["spans"]) == len(ab) == n
    assert all(p["fall"][0] <= p["fall"][1] for p in s["phases"].values())
    assert all(
        a["top"] != a["low"] and a["n"] == len(ind["curves"]["0"]["ablation"]["none"])
        for a in ab.values()
    )
    assert ir.phase_table(ind).count("\n") == n and ir.ablation_text(ind, ab).count("seed ") == n
    assert "controls (uniform head" in ir.formation_text(ind, s)


def test_score_intervals_match_whole_batch_scores():
    from mha_course.experiments.head_scores_report import per_window_scores
    from mha_course.gpt.heads import previous_token_score

    torch.manual_seed(0)
    w = [torch.softmax(torch.randn(3, 2, 6, 6), -1) for _ in range(2)]  # 2 layers, B = 3, H = 2
    ids = torch.randint(0, 5, (3, 6))
    per = per_window_scores(w, ids, [0])
    assert per["previous"].shape == (3, 2, 2) and per["newline"].shape == (3, 2, 2)
    # equal-length windows: the mean over windows is the whole batch's score
    torch.testing.assert_close(
        per["previous"].mean(0), torch.stack([previous_token_score(x) for x in w])
    )
    with pytest.raises(ValueError, match="weights, ids: expected a non-empty list"):
        per_window_scores(w, ids[:2], [0])


def test_unseen_text_report_prints_every_loss_and_difference():
    from mha_course.experiments.gpt_unseen_text import load_results, report

    un = load_results()
    text = report(un)
    assert len(text.splitlines()) == 1 + len(un["loss"]) + 2
    assert "never minus trained" in text and f"{un['never_trained_stretches']} stretches" in text
