"""Chapter 16's trained-model experiment (issue 24) and the experiments' shared result writer."""

from __future__ import annotations

import json

import pytest
import torch

from mha_course import KIVICache
from mha_course.experiments._common import write_result
from mha_course.experiments.kv_quant import (
    CHUNK,
    CONTRASTS,
    DECODE,
    DEFAULT_OUT,
    SCHEMA,
    ResidualCache,
    TransformedCache,
    _asym,
    _sym,
)


def test_write_result_appends_time_then_stamp_then_extras(tmp_path):
    out = tmp_path / "sub" / "r.json"
    r = write_result({"schema": "x", "a": 1}, out, t0=0.0, stamp={"s": 1}, command="c")
    assert list(r) == ["schema", "a", "wall_time_s", "stamp", "command"]
    assert json.loads(out.read_text()) == r and out.read_text().endswith("}\n")


def test_transformed_cache_hands_back_the_transform_of_one_chunk():
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    c = TransformedCache(lambda x: 2 * x, lambda x: -x)
    k2, v2 = c.update(k, v)
    assert torch.equal(k2, 2 * k) and torch.equal(v2, -v) and c.length == 5
    with pytest.raises(ValueError, match="one prompt chunk"):
        c.update(k, v)


def test_residual_cache_with_kivis_quantizers_is_kivi_and_holds_the_same_positions():
    # Like with like (issue 32): the residual wrapper must keep exactly KIVI's full-precision positions.
    kivi, same = (
        KIVICache(2, 16, 16),
        ResidualCache(_asym("channel", 16, 2), _asym("token", None, 2)),
    )
    int4 = ResidualCache(_sym("token", 4), _sym("token", 4))
    torch.manual_seed(0)
    for _ in range(40):
        k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
        (ka, va), (kb, vb), (kc, vc) = kivi.update(k, v), same.update(k, v), int4.update(k, v)
        assert torch.equal(ka, kb) and torch.equal(va, vb)
        assert int4.full_precision_tokens == kivi.full_precision_tokens
        r_k, r_v = kivi.full_precision_tokens  # the residual is returned as it came
        assert torch.equal(kc[..., kc.shape[-2] - r_k :, :], ka[..., ka.shape[-2] - r_k :, :])
        assert torch.equal(vc[..., vc.shape[-2] - r_v :, :], va[..., va.shape[-2] - r_v :, :])
    assert not torch.equal(kc, ka)  # the quantized part differs: other quantizers


def test_committed_results_have_every_scheme_paired_on_all_windows():
    res = json.loads(DEFAULT_OUT.read_text())
    assert res["schema"] == SCHEMA and res["val_windows"] == 593 and "date_utc" in res["stamp"]
    for m in res["models"].values():
        assert set(m["loss"]) == set(CHUNK) | set(DECODE)
        assert abs(m["loss"]["float decode"] - m["loss"]["float"]) < 1e-4  # decode == one chunk
        assert (
            set(m["contrasts"]) == set(CONTRASTS) and len(m["key_channel_spread"]) == m["n_layer"]
        )
        for d in list(m["minus_float"].values()) + list(m["contrasts"].values()):
            assert d["ci95"][0] <= d["mean"] <= d["ci95"][1] and d["se"] > 0
