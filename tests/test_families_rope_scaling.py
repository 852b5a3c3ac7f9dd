"""Chapter 20: RoPE scaling as the long-context checkpoints ship it — ``llama3`` (Llama
3.1–3.3), ``linear``, ``dynamic`` and ``yarn`` (Qwen 2.5, DeepSeek V3). The speeds and the
cos/sin factor equal ``transformers``' own ``ROPE_INIT_FUNCTIONS``; tiny models built by
``transformers`` with each scaling give the same logits and greedy tokens in the course's
modules; dropping the scaling changes them. Nothing is downloaded."""

from __future__ import annotations

import dataclasses

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the [hf] extra (transformers) is not installed"
)

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

from mha_course.families import FamilyLM, config_from_hf, from_hf, greedy_generate  # noqa: E402
from mha_course.families.scaled_rope import RopeScaling, scaled_frequencies  # noqa: E402
from mha_course.families.tiny import VOCAB, tiny_hf_config, tiny_hf_model  # noqa: E402

# D = 8 at base 10^4: wavelengths 6.3, 63, 628, 6283 — against an original context of 64 with
# llama3's factors 1 and 4 (limits 64 and 16), one pair is fast, one medium, two slow.
SCALINGS = {
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "yarn-deepseek": {
        "rope_type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "yarn-attention-factor": {
        "rope_type": "yarn",
        "factor": 2.0,
        "attention_factor": 1.3,
        "original_max_position_embeddings": 32,
        "beta_fast": 8,
        "beta_slow": 2,
    },
}
# (family, scaling, config changes): dynamic's max_position_embeddings 8 < the 20 tokens run
MODELS = [
    ("llama", "llama3", {}),
    ("llama", "linear", {}),
    ("llama", "dynamic", {"max_position_embeddings": 8}),
    ("llama", "yarn", {}),
    ("qwen2", "yarn", {}),  # Qwen 2.5's long-context config
    ("mistral", "linear", {}),
    ("deepseek_v3", "yarn-deepseek", {}),  # DeepSeek V3's: mscale_all_dim scales 1/sqrt(d) too
    ("llama", "yarn-attention-factor", {}),
]


def rope(name: str) -> dict:
    return {"rope_theta": 10000.0, **SCALINGS[name]}


def hf_config(family: str, name: str, **changes):
    return tiny_hf_config(family, rope_parameters=rope(name), **changes)


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("seq_len", [None, 6, 40])
def test_speeds_and_factor_equal_transformers(name, seq_len):
    cfg = hf_config("llama", name, max_position_embeddings=16)
    kind = SCALINGS[name]["rope_type"]
    theirs, their_factor = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu", seq_len=seq_len)
    scaling = config_from_hf(cfg).rope_scaling
    mine, my_factor = scaled_frequencies(scaling, 8, 10000.0, seq_len)
    torch.testing.assert_close(mine, theirs.double(), rtol=2e-7, atol=0)  # theirs: float32
    assert my_factor == pytest.approx(their_factor, rel=1e-12)
    default, _ = scaled_frequencies(None, 8, 10000.0)
    if not (kind == "dynamic" and (seq_len or 0) <= 16):  # dynamic acts only past 16 positions
        assert (mine - default).abs().max() > 1e-4


def test_llama3_scales_slow_pairs_keeps_fast_ones_and_smooths_between():
    s = RopeScaling("llama3", factor=8.0, original_max_positions=64)
    default, _ = scaled_frequencies(None, 8, 10000.0)
    mine, _ = scaled_frequencies(s, 8, 10000.0)
    ratio = (default / mine).tolist()
    assert ratio[0] == 1.0 and ratio[2] == ratio[3] == 8.0 and 1.0 < ratio[1] < 8.0


@pytest.mark.parametrize("family, name, changes", MODELS, ids=[f"{f}-{n}" for f, n, _ in MODELS])
def test_scaled_models_equal_transformers_in_logits_and_greedy_tokens(family, name, changes):
    cfg_changes = dict(changes, rope_parameters=rope(name))
    hf = tiny_hf_model(family, **cfg_changes)
    ours = from_hf(hf)
    assert ours.config.rope_scaling.kind == SCALINGS[name]["rope_type"]
    x = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x).logits, rtol=0, atol=1e-6)
        unscaled = FamilyLM(dataclasses.replace(ours.config, rope_scaling=None)).double()
        unscaled.load_state_dict(ours.state_dict())
        assert (unscaled(x) - hf(x).logits).abs().max() > 1e-4  # the scaling matters here
    hf = tiny_hf_model(family, **cfg_changes)  # fresh: dynamic keeps state on the module
    prompt = x[:1, :4]
    theirs = hf.generate(
        prompt, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None
    )
    assert torch.equal(greedy_generate(ours, prompt, 12), theirs)


@pytest.mark.parametrize(
    "params, match",
    [
        (
            {
                "rope_type": "longrope",
                "rope_theta": 1e4,
                "short_factor": [1.0] * 4,
                "long_factor": [2.0] * 4,
                "original_max_position_embeddings": 16,
            },
            "'longrope'",
        ),
        (
            {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
            "partial_rotary_factor",
        ),
    ],
)
def test_other_rescalings_are_refused_by_name(params, match):
    cfg = tiny_hf_config("llama")
    cfg.rope_parameters = params
    with pytest.raises(ValueError, match=match):
        config_from_hf(cfg)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"kind": "ntk"}, "kind"),
        ({"kind": "linear", "factor": 0}, "factor"),
        ({"kind": "llama3", "factor": 8.0}, "original_max_positions"),
        ({"kind": "dynamic", "factor": None}, "factor"),
    ],
)
def test_a_bad_scaling_is_refused_naming_the_argument(changes, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        RopeScaling(**changes)
