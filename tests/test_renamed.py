"""Renamed names keep a learner's saved notebook running: ``GPTConfig.block_size`` (nanoGPT's word
for T) is now ``context_length`` (``block_size`` is chapter 16's tokens per paged block). Each old
spelling gives the new one's result with a FutureWarning naming the new name; files written before
the rename (checkpoints, ``configs/``) load silently; the old ``mha-course train --block-size``
flag says what to write."""

from __future__ import annotations

import warnings

import pytest
import torch

from mha_course.cli import build_parser
from mha_course.commands.train import resolve
from mha_course.gpt import GPT, GPTConfig, TrainConfig, evaluate, load_checkpoint
from mha_course.gpt.checkpoint import save_checkpoint
from mha_course.gpt.config import from_dict
from mha_course.gpt.data import training_batch, validation_windows
from mha_course.gpt.tokenizer import CharTokenizer

DATA = torch.arange(200) % 11  # (N,) ids of an 11-character vocabulary


def _config_set(value: int) -> int:
    config = GPTConfig()
    config.block_size = value
    return config.context_length


def _tiny() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, context_length=8, n_layer=1, n_head=2, n_embd=8)).eval()


MODEL = _tiny()

# name -> (the old spelling, the new spelling): equal results, a FutureWarning from the old only
OLD_AND_NEW = {
    "GPTConfig(block_size=...)": (
        lambda: GPTConfig(block_size=32).context_length,
        lambda: GPTConfig(context_length=32).context_length,
    ),
    "config.block_size": (
        lambda: GPTConfig(context_length=32).block_size,
        lambda: GPTConfig(context_length=32).context_length,
    ),
    "config.block_size = ...": (lambda: _config_set(16), lambda: 16),
    "evaluate(..., block_size=...)": (
        lambda: evaluate(MODEL, DATA, block_size=8, max_windows=3),
        lambda: evaluate(MODEL, DATA, context_length=8, max_windows=3),
    ),
    "training_batch(..., block_size=...)": (
        lambda: training_batch(DATA, block_size=8, global_batch=2, seed=0, step=1),
        lambda: training_batch(DATA, context_length=8, global_batch=2, seed=0, step=1),
    ),
    "validation_windows(..., block_size=...)": (
        lambda: validation_windows(DATA, block_size=8),
        lambda: validation_windows(DATA, context_length=8),
    ),
}


def _same(a, b) -> None:
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    else:
        assert a == b


@pytest.mark.parametrize("case", list(OLD_AND_NEW))
def test_old_name_works_and_warns_naming_the_new_one(case):
    old, new = OLD_AND_NEW[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        want = new()
    with pytest.warns(FutureWarning, match="block_size was renamed context_length") as record:
        got = old()
    assert record[0].filename == __file__, "the warning points at the caller's line"
    _same(got, want)


def test_the_old_name_is_not_a_field():
    """Stored configs hold the new name only; the old one is no second home that could drift."""
    assert "block_size" not in GPTConfig().__dataclass_fields__
    assert "block_size" not in repr(GPTConfig())


def test_a_config_dict_from_before_the_rename_loads_silently():
    old = {"vocab_size": 11, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 8}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = from_dict(GPTConfig, old)
    assert config.context_length == 8


def test_a_checkpoint_from_before_the_rename_loads(tmp_path):
    """A checkpoint written by ``mha-course train`` before the rename (its stored config says
    ``block_size``, as the shipped ``checkpoints/`` do) loads with the same weights."""
    path = tmp_path / "old.pt"
    tok = CharTokenizer("abcdefghijk")
    save_checkpoint(path, MODEL, TrainConfig(), tok, {"corpus_sha256": "x"})
    raw = torch.load(path, weights_only=True)
    raw["config"]["block_size"] = raw["config"].pop("context_length")
    torch.save(raw, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ckpt = load_checkpoint(path, verify_corpus=False)
    assert ckpt.config.context_length == 8
    x = DATA[:8][None]  # (1, T)
    torch.testing.assert_close(ckpt.model(x), MODEL(x), rtol=1e-3, atol=1e-3)  # float16 weights


def test_train_flag_from_before_the_rename(capsys):
    args = build_parser().parse_args(["train", "--block-size", "32"])
    assert resolve(args)[0].context_length == 32
    assert "--block-size was renamed --context-length" in capsys.readouterr().err
    args = build_parser().parse_args(["train", "--context-length", "32"])
    assert resolve(args)[0].context_length == 32
    assert capsys.readouterr().err == ""
