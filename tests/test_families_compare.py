"""Chapter 20's ``generate --compare``: a split of two greedy generations at a bfloat16 tie is
reported (the step, both models' logits, the margins) and is not a failure; a real difference
still is. And the end-of-sequence ids come from the checkpoint's generation config and config,
not only from its tokenizer. Nothing is downloaded."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the [hf] extra (transformers) is not installed"
)

from mha_course.cli import main  # noqa: E402
from mha_course.families import greedy_generate, load_pretrained  # noqa: E402
from mha_course.families.compare import compare_greedy, rounding_step  # noqa: E402
from mha_course.families.pretrained import eos_token_ids  # noqa: E402
from mha_course.families.tiny import save_tiny_checkpoint  # noqa: E402

bf16 = torch.bfloat16


def fixed(logits):
    """A stand-in model whose last-position logits are ``logits`` (V,) whatever the input."""
    logits = torch.tensor(logits, dtype=bf16)

    def call(ids):
        return logits.expand(ids.shape[0], ids.shape[1], len(logits))

    return call


def hf_fixed(logits):
    ours = fixed(logits)
    return lambda ids: SimpleNamespace(logits=ours(ids))


PROMPT = torch.tensor([[5, 6]])


def test_rounding_step_is_one_ulp():
    assert rounding_step(1.0, bf16) == 2**-7
    assert rounding_step(0.3, bf16) == 2**-9
    assert rounding_step(3.0, torch.float32) == 2**-22


def test_same_tokens_are_the_same():
    seq = torch.tensor([[5, 6, 1, 2]])
    assert compare_greedy(fixed([0.0] * 3), hf_fixed([0.0] * 3), 2, seq, seq.clone()).same


def test_a_split_at_a_tie_is_reported_with_step_logits_and_margins():
    # ours picks token 1 (one bfloat16 step above token 2), transformers ties them and picks 2
    mine, theirs = torch.tensor([[5, 6, 0, 1]]), torch.tensor([[5, 6, 0, 2]])
    result = compare_greedy(
        fixed([0.0, 0.5, 0.5 - 2**-9]), hf_fixed([0.0, 0.5, 0.5]), 2, mine, theirs
    )
    assert not result.same and result.tie and result.consistent
    assert (result.step, result.ours, result.theirs) == (1, 1, 2)
    assert result.our_logits == (0.5, 0.5 - 2**-9) and result.their_logits == (0.5, 0.5)
    line = result.line()
    assert "tie in torch.bfloat16 at new token 1" in line and "margin 0.00195" in line


def test_a_split_by_more_than_a_rounding_step_is_different():
    mine, theirs = torch.tensor([[5, 6, 1]]), torch.tensor([[5, 6, 2]])
    result = compare_greedy(fixed([0.0, 0.5, 0.25]), hf_fixed([0.0, 0.25, 0.5]), 2, mine, theirs)
    assert not result.consistent
    assert result.line().startswith("transformers' generate: DIFFERENT tokens from new token 0")


def test_one_generation_stopping_earlier_is_different():
    result = compare_greedy(
        fixed([0.0] * 3),
        hf_fixed([0.0] * 3),
        2,
        torch.tensor([[5, 6, 1]]),
        torch.tensor([[5, 6, 1, 2]]),
    )
    assert not result.consistent and "one generation stops" in result.line()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    save_tiny_checkpoint(path, "qwen3")
    return path


BFLOAT16 = ["--dtype", "bfloat16", "--max-new-tokens", "24", "--compare", "--prompt"]


def test_the_command_in_bfloat16_reports_a_tie_and_exits_0(folder, capsys):
    """Measured on this tiny Qwen 3 (24 tokens) with the course's eager attention: the two
    generations split at new token 18, where both models' logits for the two tokens are equal
    in bfloat16 (exit 1 before)."""
    rc = main(
        ["generate", "--from-pretrained", str(folder), *BFLOAT16, "softmax weights"]
        + ["--attention", "eager"]
    )
    out = capsys.readouterr().out
    assert "the same tokens up to a tie in torch.bfloat16 at new token" in out, out
    assert rc == 0


def test_the_command_in_bfloat16_with_the_fused_kernel_gives_transformers_tokens(folder, capsys):
    """The default, torch's SDPA as transformers runs it: measured, the same 24 tokens."""
    rc = main(["generate", "--from-pretrained", str(folder), *BFLOAT16, "softmax weights"])
    out = capsys.readouterr().out
    assert "transformers' generate: the same tokens\n" in out, out
    assert rc == 0


def test_an_unknown_attention_is_refused_by_option(folder, capsys):
    rc = main(["generate", "--from-pretrained", str(folder), "--attention", "fast"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("--attention: expected one of ('eager', 'sdpa'"), err
    assert err.endswith("got 'fast'") and "\n" not in err, err


def test_end_of_sequence_ids_come_from_generation_config_and_config(folder, tmp_path, capsys):
    import shutil

    work = tmp_path / "ckpt"
    shutil.copytree(folder, work)
    ours, _ = load_pretrained(str(work))
    tokenizer = transformers.AutoTokenizer.from_pretrained(work)
    assert tokenizer.eos_token_id is None  # the tokenizer alone would never stop
    prompt = tokenizer("import torch", return_tensors="pt").input_ids
    P = prompt.shape[1]
    free = greedy_generate(ours, prompt, 8)[0, P:].tolist()  # what it says with no stop
    stop = free[2]  # make it stop at its third new token
    assert stop not in free[:2]
    (work / "generation_config.json").write_text(json.dumps({"eos_token_id": [stop, 7]}))
    config = json.loads((work / "config.json").read_text())
    (work / "config.json").write_text(json.dumps({**config, "eos_token_id": 9}))
    assert eos_token_ids(str(work), tokenizer) == [stop, 7, 9]
    rc = main(
        [
            "generate",
            "--from-pretrained",
            str(work),
            "--prompt",
            "import torch",
            "--max-new-tokens",
            "8",
            "--compare",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "qwen3: 3 new tokens in" in out, out  # 8 before: no end-of-sequence id
    assert "transformers' generate: the same tokens" in out
