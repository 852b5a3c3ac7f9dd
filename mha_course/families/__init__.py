"""Chapter 20: production model families (GPT-2, Llama, Qwen, Mistral, Gemma 2 and 3, DeepSeek V3,
OLMo 2, Phi-3)
as one configurable model built from the course's modules, and converters from
Hugging Face ``transformers`` checkpoints (the ``[hf]`` extra; the model itself needs only torch).
"""

from mha_course.families.config import FamilyConfig
from mha_course.families.convert import from_hf
from mha_course.families.hf_config import FAMILIES, config_from_hf
from mha_course.families.hf_state import state_from_hf
from mha_course.families.model import FamilyLM, greedy_generate
from mha_course.families.pretrained import load_pretrained

__all__ = [
    "FAMILIES",
    "FamilyConfig",
    "FamilyLM",
    "config_from_hf",
    "from_hf",
    "greedy_generate",
    "load_pretrained",
    "state_from_hf",
]
