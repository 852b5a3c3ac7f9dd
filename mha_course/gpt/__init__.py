"""Chapter 13: a small GPT trained on the Python standard library's source.

``GPT`` / ``GPTConfig`` (the model), ``train`` (what ``mha-course train`` runs),
``load_checkpoint``, ``evaluate`` (validation nats per character) and ``generate``.
"""

from mha_course.gpt.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from mha_course.gpt.config import GPTConfig, TrainConfig
from mha_course.gpt.convert import convert_to_gqa
from mha_course.gpt.corpus import Corpus, CorpusMismatchWarning, load_corpus
from mha_course.gpt.evaluate import bigram_loss, evaluate, uniform_loss, unigram_loss
from mha_course.gpt.generate import generate, sample_next, sampling_distribution
from mha_course.gpt.model import GPT, lm_loss
from mha_course.gpt.tokenizer import CharTokenizer
from mha_course.gpt.train import train

__all__ = [
    "GPT",
    "GPTConfig",
    "TrainConfig",
    "Checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "convert_to_gqa",
    "Corpus",
    "CorpusMismatchWarning",
    "load_corpus",
    "evaluate",
    "unigram_loss",
    "bigram_loss",
    "uniform_loss",
    "lm_loss",
    "CharTokenizer",
    "train",
    "generate",
    "sample_next",
    "sampling_distribution",
]
