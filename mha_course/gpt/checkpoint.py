"""Chapter 13: stamped checkpoints — weights plus everything needed to trust them.

A shipped checkpoint holds the model's weights in float16 (half the bytes; the loss it
reports is measured *after* that rounding), its :class:`GPTConfig` and :class:`TrainConfig`,
the vocabulary, the corpus's SHA-256, the loss curve, the wall time, the hardware and the
versions. Training also keeps a float32 ``*.resume.pt`` beside it (weights and optimizer
state) so a run can be continued exactly; that one is not shipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from mha_course.gpt.config import GPTConfig, TrainConfig, from_dict, to_dict
from mha_course.gpt.corpus import Corpus, check_corpus, load_corpus
from mha_course.gpt.model import GPT
from mha_course.gpt.tokenizer import CharTokenizer

FORMAT = "mha-course-gpt/1"


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, float32) and what was stored with it."""

    model: GPT
    config: GPTConfig
    train_config: TrainConfig
    tokenizer: CharTokenizer
    meta: dict = field(default_factory=dict)

    @property
    def history(self) -> dict:
        """The loss curve: ``{"step": [...], "train_loss": [...], "val_step": [...], ...}``."""
        return self.meta.get("history", {})

    def data(self, corpus: Corpus | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Train and validation ids of ``corpus`` (default: this Python's, checksum verified).

        Shape:
            Returns (N_train,), (N_val,) int64.
        """
        if corpus is None:
            corpus = load_corpus()
        check_corpus(corpus, self.meta["corpus_sha256"])
        return self.tokenizer.encode(corpus.train), self.tokenizer.encode(corpus.val)


def resume_path(path: str | Path) -> Path:
    """Where the float32 resume state of checkpoint ``path`` lives (``x.pt`` -> ``x.resume.pt``)."""
    path = Path(path)
    return path.with_name(path.stem + ".resume.pt")


def save_checkpoint(
    path: str | Path,
    model: GPT,
    train_config: TrainConfig,
    tokenizer: CharTokenizer,
    meta: dict,
    dtype: torch.dtype = torch.float16,
) -> None:
    """Write the shipped checkpoint: weights cast to ``dtype`` and the stamp in ``meta``."""
    state = {
        k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype)
        for k, v in model.state_dict().items()
        if k != "lm_head.weight" or not model.config.tie_weights
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "format": FORMAT,
            "config": to_dict(model.config),
            "train_config": to_dict(train_config),
            "vocab": tokenizer.vocab,
            "state_dict": state,
            "meta": meta,
        },
        path,
    )


def load_checkpoint(
    path: str | Path, device: torch.device | str = "cpu", verify_corpus: bool = True
) -> Checkpoint:
    """Load a checkpoint written by ``mha-course train`` (model in eval mode, float32).

    With ``verify_corpus`` this Python's corpus checksum is compared with the stored one and a
    :class:`~mha_course.gpt.corpus.CorpusMismatchWarning` explains any difference.
    """
    raw = torch.load(Path(path), map_location="cpu", weights_only=True)
    if raw.get("format") != FORMAT:
        raise ValueError(f"path: expected a {FORMAT} checkpoint, got format {raw.get('format')!r}")
    config = from_dict(GPTConfig, raw["config"])
    model = GPT(config)
    state = {k: v.float() if v.is_floating_point() else v for k, v in raw["state_dict"].items()}
    if config.tie_weights:
        state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state)
    model.to(device).eval()
    ckpt = Checkpoint(
        model,
        config,
        from_dict(TrainConfig, raw["train_config"]),
        CharTokenizer(raw["vocab"]),
        raw["meta"],
    )
    if verify_corpus:
        check_corpus(load_corpus(), ckpt.meta["corpus_sha256"], what=Path(path).name)
    return ckpt
