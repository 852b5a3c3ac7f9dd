"""Chapters 6 and 10: the sequence-reversal task, its two accuracies and the shared trainer."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_course.analysis.tasks import (
    digit_accuracy,
    reversal_batch,
    sequence_accuracy,
    sequence_loss,
    train_reversal,
)
from mha_course.models.tiny_transformer import TinyTransformer


def test_reversal_batch_is_seeded_and_reversed():
    tokens, targets = reversal_batch(4, 6, 10, generator=torch.Generator().manual_seed(0))
    again, _ = reversal_batch(4, 6, 10, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (4, 6) and tokens.dtype == torch.int64
    assert torch.equal(tokens, again) and torch.equal(targets, tokens[:, torch.arange(5, -1, -1)])
    assert 0 <= int(tokens.min()) and int(tokens.max()) < 10


def _logits_for(pred: torch.Tensor, vocab: int = 5) -> torch.Tensor:
    return F.one_hot(pred, vocab).double()  # (B, T) -> (B, T, V), argmax = pred


def test_digit_accuracy_counts_positions_and_sequence_accuracy_whole_sequences():
    targets = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4], [0, 0, 0, 0]])
    pred = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 0], [1, 1, 1, 1]])  # all right, 3 of 4, none
    logits = _logits_for(pred)
    assert digit_accuracy(logits, targets) == pytest.approx(7 / 12)
    assert sequence_accuracy(logits, targets) == pytest.approx(1 / 3)


def test_sequence_loss_is_the_mean_cross_entropy_over_positions():
    g = torch.Generator().manual_seed(1)
    logits, targets = torch.randn(3, 4, 5, generator=g), torch.randint(0, 5, (3, 4), generator=g)
    per_position = torch.stack(
        [F.cross_entropy(logits[b], targets[b], reduction="none") for b in range(3)]
    )
    torch.testing.assert_close(sequence_loss(logits, targets), per_position.mean())


@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
def test_train_reversal_lowers_the_loss_and_leaves_eval_mode(optimizer):
    torch.manual_seed(0)
    model = TinyTransformer(6, 5, embed_dim=16, num_heads=2, num_layers=1)
    losses = train_reversal(
        model, steps=60, batch_size=32, seq_len=5, vocab_size=6, lr=1e-2, optimizer=optimizer
    )
    assert len(losses) == 60 and not model.training
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10


class _WithWeights(nn.Module):
    """A model whose forward returns (logits, weights), as chapter 6's encoder-decoder does."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, tokens):
        return self.inner(tokens), None


def test_train_reversal_takes_a_model_that_returns_a_tuple():
    torch.manual_seed(0)
    plain = train_reversal(
        TinyTransformer(6, 5, embed_dim=16, num_heads=2, num_layers=1),
        steps=3,
        seq_len=5,
        vocab_size=6,
        optimizer="adam",
    )
    torch.manual_seed(0)
    wrapped = _WithWeights(TinyTransformer(6, 5, embed_dim=16, num_heads=2, num_layers=1))
    tupled = train_reversal(
        wrapped,
        steps=3,
        seq_len=5,
        vocab_size=6,
        optimizer="adam",
        logits_of=lambda m, tokens: m(tokens)[0],
    )
    assert plain == tupled  # same seed, same batches, same steps: the same losses to the bit


def test_train_reversal_rejects_an_unknown_optimizer():
    with pytest.raises(ValueError, match="optimizer"):
        train_reversal(
            TinyTransformer(6, 5, embed_dim=16, num_heads=2, num_layers=1), steps=1, optimizer="sgd"
        )
