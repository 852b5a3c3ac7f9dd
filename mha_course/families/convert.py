"""Chapter 20: Hugging Face ``transformers`` checkpoints into :class:`FamilyLM`.

:func:`from_hf` builds the course's model from a loaded ``transformers`` causal LM: its config read
by :func:`~mha_course.families.hf_config.config_from_hf` (refusing, with the option's name, what
the course does not model), its weights renamed and reshaped by
:func:`~mha_course.families.hf_state.state_from_hf` (GPT-2's fused ``Conv1D`` projections, Phi-3's
fused ones, every other family's ``nn.Linear`` under Llama's names).
"""

from __future__ import annotations

from mha_course.families.hf_config import (  # noqa: F401 - public names of convert.py before
    FAMILIES,
    config_from_hf,
)
from mha_course.families.hf_state import state_from_hf
from mha_course.families.model import FamilyLM


def from_hf(hf_model, impl: str = "sdpa") -> FamilyLM:
    """The course's model with the weights, dtype and config of a loaded ``transformers``
    causal LM (``AutoModelForCausalLM``), in eval mode; ``impl`` as :class:`FamilyLM`'s."""
    config = config_from_hf(hf_model.config)
    sd = hf_model.state_dict()
    dtype = next(iter(sd.values())).dtype
    model = FamilyLM(config, impl).to(dtype)
    missing, unexpected = model.load_state_dict(state_from_hf(sd, config, model), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_weights)]
    if missing or unexpected:
        raise ValueError(f"state_dict: missing {missing}, unexpected {unexpected}")
    return model.eval()
