"""Chapter 13: a small GPT trained on the Python standard library's source.

``GPT`` / ``GPTConfig`` (the model), ``train`` (what ``mha-course train`` runs),
``load_checkpoint``, ``evaluate`` (validation nats per character) and ``generate``.
"""

from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .config import GPTConfig, TrainConfig
from .convert import convert_to_gqa
from .corpus import Corpus, CorpusMismatchWarning, load_corpus
from .evaluate import bigram_loss, evaluate, uniform_loss, unigram_loss
from .generate import generate, sample_next, sampling_distribution
from .model import GPT, lm_loss
from .tokenizer import CharTokenizer
from .train import train

__all__ = [
    "GPT", "GPTConfig", "TrainConfig", "Checkpoint", "load_checkpoint", "save_checkpoint",
    "convert_to_gqa", "Corpus", "CorpusMismatchWarning", "load_corpus", "evaluate",
    "unigram_loss", "bigram_loss", "uniform_loss", "lm_loss", "CharTokenizer", "train",
    "generate", "sample_next", "sampling_distribution",
]
