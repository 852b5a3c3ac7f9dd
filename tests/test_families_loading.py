"""Chapter 20: loading is strict for every family. A checkpoint tensor nothing reads, a tensor
the model needs that the checkpoint lacks, and a tensor of another shape are refused by name —
in the converter (``state_from_hf``) and in the folder loader (``load_pretrained``), where
``transformers``' own loader would drop or randomly initialise them. Nothing is downloaded."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the [hf] extra (transformers) is not installed"
)

from mha_course.families import FAMILIES, from_hf, load_pretrained, state_from_hf  # noqa: E402
from mha_course.families.config import FamilyConfig  # noqa: E402
from mha_course.families.convert import config_from_hf  # noqa: E402
from mha_course.families.model import FamilyLM  # noqa: E402
from mha_course.families.tiny import tiny_hf_config, tiny_hf_model  # noqa: E402

# per family: layer 0's key projection and the final norm, as transformers names them
KEY_PROJ = {
    "gpt2": "transformer.h.0.attn.c_attn.weight",
    "phi3": "model.layers.0.self_attn.qkv_proj.weight",
    "deepseek_v3": "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
}
FINAL_NORM = {"gpt2": "transformer.ln_f.weight"}


def key_proj(family: str) -> str:
    return KEY_PROJ.get(family, "model.layers.0.self_attn.k_proj.weight")


def final_norm(family: str) -> str:
    return FINAL_NORM.get(family, "model.norm.weight")


def extra_key(family: str) -> str:
    prefix = "transformer.h.0" if family == "gpt2" else "model.layers.0"
    return prefix + ".self_attn.extra_proj.weight"


@pytest.fixture(scope="module", params=FAMILIES)
def converted(request):
    hf = tiny_hf_model(request.param, torch.float32)
    return request.param, hf.state_dict(), from_hf(hf)


def test_every_family_is_in_the_table():
    assert set(FAMILIES) == {
        "gpt2",
        "llama",
        "qwen2",
        "qwen3",
        "mistral",
        "gemma2",
        "deepseek_v3",
        "gemma3_text",
        "olmo2",
        "phi3",
    }


def test_the_state_dict_converts_as_it_is(converted):
    family, sd, ours = converted
    assert set(state_from_hf(sd, ours.config, ours)) >= set(ours.state_dict())


@pytest.mark.parametrize("which", ["key projection", "final norm"])
def test_a_missing_weight_is_refused_by_name(converted, which):
    family, sd, ours = converted
    key = key_proj(family) if which == "key projection" else final_norm(family)
    assert key in sd
    broken = {k: v for k, v in sd.items() if k != key}
    with pytest.raises(ValueError, match=f"state_dict: expected '{key}'"):
        state_from_hf(broken, ours.config, ours)


def test_an_unexpected_weight_is_refused_by_name(converted):
    family, sd, ours = converted
    broken = dict(sd, **{extra_key(family): torch.zeros(2)})
    with pytest.raises(ValueError, match="does not model") as err:
        state_from_hf(broken, ours.config, ours)
    assert extra_key(family) in str(err.value)


def test_gpt2_cross_attention_is_refused_by_name():
    """An encoder-decoder's GPT-2 (``add_cross_attention``) has cross-attention weights in
    every block: the config is refused, and the weights are never dropped without a word."""
    with pytest.raises(ValueError, match="add_cross_attention"):
        config_from_hf(tiny_hf_config("gpt2", add_cross_attention=True))
    sd = tiny_hf_model("gpt2", torch.float32, add_cross_attention=True).state_dict()
    plain = config_from_hf(tiny_hf_config("gpt2"))
    with pytest.raises(ValueError, match="does not model") as err:
        state_from_hf(sd, plain, FamilyLM(plain))
    assert "crossattention" in str(err.value)


def _saved(tmp_path, family: str, edit) -> str:
    """A save_pretrained folder of ``family`` whose model.safetensors ``edit`` changed."""
    from safetensors.torch import load_file, save_file

    tiny_hf_model(family, torch.float32).save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    sd = load_file(path)
    save_file(edit(sd), path, metadata={"format": "pt"})
    return str(tmp_path)


def test_a_saved_checkpoint_loads_and_equals_transformers(tmp_path):
    folder = _saved(tmp_path, "llama", lambda sd: sd)
    ours, hf = load_pretrained(folder, keep_hf=True)
    x = torch.randint(0, hf.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_file_with_a_missing_and_an_extra_tensor_is_refused(tmp_path, family):
    """transformers' loader alone would initialise the key projection at random and drop the
    extra tensor (exit 0 before): the course names both."""

    def edit(sd):
        del sd[key_proj(family)]
        sd["extra.weight"] = torch.zeros(2)
        return sd

    with pytest.raises(ValueError, match="^checkpoint: ") as err:
        load_pretrained(_saved(tmp_path, family, edit))
    assert key_proj(family) in str(err.value) and "'extra.weight'" in str(err.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_without_its_final_norm_is_refused(tmp_path, family):
    def edit(sd):
        del sd[final_norm(family)]
        return sd

    with pytest.raises(ValueError, match="missing") as err:
        load_pretrained(_saved(tmp_path, family, edit))
    assert final_norm(family) in str(err.value)


def test_a_table_of_another_shape_is_refused_naming_both_shapes(tmp_path):
    def edit(sd):  # a vocabulary of 70 stored, the config says 64
        sd["model.embed_tokens.weight"] = torch.zeros(70, sd["model.embed_tokens.weight"].shape[1])
        return sd

    with pytest.raises(ValueError, match="model.embed_tokens.weight") as err:
        load_pretrained(_saved(tmp_path, "llama", edit))
    assert "(70, 32)" in str(err.value) and "(64, 32)" in str(err.value)


def test_the_course_model_is_strict_about_its_own_names():
    """The converter's output fills every parameter of FamilyLM: nothing left at init."""
    hf = tiny_hf_model("qwen3", torch.float32)
    ours = from_hf(hf)
    fresh = FamilyLM(FamilyConfig(**{**ours.config.__dict__}))
    missing, unexpected = fresh.load_state_dict(state_from_hf(hf.state_dict(), ours.config, fresh))
    assert not missing and not unexpected
