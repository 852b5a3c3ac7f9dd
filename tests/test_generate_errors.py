"""``mha-course generate --from-pretrained DIR``: a broken folder or a bad option ends in ONE
line naming the cause (``--from-pretrained DIR: ...`` or the option), exit status 2 — never a
traceback — for every family. One table of broken folders; nothing is downloaded."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the [hf] extra (transformers) is not installed"
)

from mha_course.cli import main  # noqa: E402
from mha_course.families import FAMILIES, greedy_generate  # noqa: E402
from mha_course.families.tiny import save_tiny_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """One good folder per family (the tokenizer of 300 tokens, the model's vocabulary too),
    and one Mistral whose model keeps a vocabulary of 64 < the tokenizer's 300."""
    root = tmp_path_factory.mktemp("ckpt")
    for family in FAMILIES:
        save_tiny_checkpoint(root / family, family)
    save_tiny_checkpoint(root / "small_vocab", "mistral", vocab_from_tokenizer=False)
    return root


def _edit_config(folder, **changes):
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _edit_tensors(folder, edit):
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    save_file(edit(load_file(path)), path, metadata={"format": "pt"})


def _drop(name):
    def edit(sd):
        del sd[next(k for k in sd if name in k)]
        return sd

    return edit


# (what is wrong, the family folder, how it is broken, extra options, a fragment of the line)
CASES = [
    ("prompt ids outside the vocabulary", "small_vocab", None, [], "vocabulary has V = 64"),
    ("an empty prompt", "llama", None, ["--prompt", ""], "gives no tokens"),
    (
        "a config value of the wrong type",
        "llama",
        lambda d: _edit_config(d, num_attention_heads="4"),
        [],
        "'num_attention_heads' expected int, got str",
    ),
    (
        "a vocabulary size unlike the stored table",
        "qwen2",
        lambda d: _edit_config(d, vocab_size=400),
        [],
        "(300, 32)",
    ),
    (
        "a tensor shape unlike the config",
        "gemma2",
        lambda d: _edit_config(d, intermediate_size=40),
        [],
        "(48, 32)",
    ),
    (
        "a missing key projection",
        "gpt2",
        lambda d: _edit_tensors(d, _drop("h.0.attn.c_attn.weight")),
        [],
        "transformer.h.0.attn.c_attn.weight",
    ),
    (
        "an extra tensor",
        "deepseek_v3",
        lambda d: _edit_tensors(d, lambda sd: dict(sd, **{"model.extra.weight": torch.zeros(3)})),
        [],
        "model.extra.weight",
    ),
    (
        "a missing final norm",
        "qwen3",
        lambda d: _edit_tensors(d, _drop("model.norm.weight")),
        [],
        "model.norm.weight",
    ),
    (
        "no weights at all",
        "mistral",
        lambda d: (d / "model.safetensors").unlink(),
        [],
        "no file named model.safetensors",
    ),
    (
        "a family the course does not model",
        "llama",
        lambda d: _edit_config(d, model_type="gpt_neox"),
        [],
        "got 'gpt_neox'",
    ),
]


@pytest.mark.parametrize(
    "what, family, breaks, options, fragment", CASES, ids=[c[0] for c in CASES]
)
def test_a_broken_folder_ends_in_one_line_and_exit_2(
    good, tmp_path, capsys, what, family, breaks, options, fragment
):
    folder = tmp_path / family
    shutil.copytree(good / family, folder)
    if breaks is not None:
        breaks(folder)
    capsys.readouterr()
    rc = main(["generate", "--from-pretrained", str(folder), "--max-new-tokens", "2", *options])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    lines = [line for line in err.splitlines() if not line.startswith("Loading weights")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"--from-pretrained {folder}: "), lines[0]
    assert fragment in lines[0], lines[0]


def test_zero_new_tokens_with_compare_is_refused_by_option(good, capsys):
    rc = main(
        ["generate", "--from-pretrained", str(good / "llama"), "--max-new-tokens", "0", "--compare"]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("--max-new-tokens: expected an int >= 1 with --compare"), err


@pytest.mark.parametrize("family", FAMILIES)
def test_every_good_family_folder_generates_and_compares(good, capsys, family):
    """The control: the same folders unbroken run and agree with transformers' generate."""
    rc = main(
        ["generate", "--from-pretrained", str(good / family), "--max-new-tokens", "4", "--compare"]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "transformers' generate: the same tokens" in out.out


def test_greedy_generate_refuses_an_empty_prompt_by_name():
    from mha_course.families import from_hf
    from mha_course.families.tiny import tiny_hf_model

    ours = from_hf(tiny_hf_model("llama"))
    with pytest.raises(ValueError, match=r"^ids: .*L >= 1.*\(1, 0\)"):
        greedy_generate(ours, torch.zeros(1, 0, dtype=torch.long), 3)
