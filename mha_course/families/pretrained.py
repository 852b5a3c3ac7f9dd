"""Chapter 20: a ``save_pretrained`` folder into the course's :class:`FamilyLM`, strictly.

``transformers``' loader forgives a checkpoint that does not fit its model: a tensor the model
has no place for is dropped, a missing one (a layer's key projection, the final norm) is
initialised at random, and both are only logged. :func:`load_pretrained` asks the loader what
it did (``output_loading_info``) and refuses the folder, naming the tensors, before the
course's model is built; a tensor whose shape differs from the config's (a vocabulary size
that does not match the stored table) is refused the same way. Nothing is dropped silently.
"""

from __future__ import annotations

import contextlib

import torch

from mha_course.families.convert import from_hf
from mha_course.families.hf_config import config_from_hf


def _transformers():
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "from_pretrained needs the hf extra: pip install -e '.[hf]' "
            "(transformers and safetensors)"
        ) from err
    return transformers


@contextlib.contextmanager
def _quiet(transformers):
    """transformers' load report and warnings off: the course says what is wrong, in one line."""
    logging = transformers.utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _names(keys, n: int = 5) -> str:
    keys = sorted(keys)
    return f"{keys[:n]}{' ...' if len(keys) > n else ''}"


def check_loading_info(info: dict) -> None:
    """Refuse what ``from_pretrained(..., output_loading_info=True)`` reports: tensors the
    model expects and the checkpoint lacks, tensors it has and the model does not read,
    tensors of another shape, and loader errors. Each is named."""
    problems = []
    if info.get("missing_keys"):
        problems.append(
            f"{len(info['missing_keys'])} tensors missing from the checkpoint "
            f"(transformers would initialise them at random): "
            f"{_names(info['missing_keys'])}"
        )
    if info.get("unexpected_keys"):
        problems.append(
            f"{len(info['unexpected_keys'])} tensors the model does not read "
            f"(transformers would drop them): {_names(info['unexpected_keys'])}"
        )
    for key, stored, expected in sorted(info.get("mismatched_keys") or ())[:3]:
        problems.append(
            f"{key!r} has shape {tuple(stored)} in the checkpoint, the config "
            f"expects {tuple(expected)}"
        )
    problems += [str(e).splitlines()[0] for e in info.get("error_msgs") or ()]
    problems += [f"{k}: {v}" for k, v in (info.get("conversion_errors") or {}).items()]
    if problems:
        raise ValueError("checkpoint: " + "; ".join(problems))


def load_pretrained(
    path: str, dtype: torch.dtype | None = None, keep_hf: bool = False, impl: str = "sdpa"
):
    """A ``save_pretrained`` folder (safetensors) -> (course model, ``transformers`` model or
    None). The config is read and checked first, so a family option the course does not model
    is refused before any weight is loaded; then every stored tensor must be read and every
    tensor the model needs stored (:func:`check_loading_info`). ``dtype`` None keeps the
    checkpoint's. Memory: the weights are held twice while they are copied; ``keep_hf=False``
    frees the source after. ``impl`` names the attention function (:class:`FamilyLM`'s).

    Needs the ``[hf]`` extra; nothing is downloaded (``local_files_only``)."""
    T = _transformers()
    with _quiet(T):
        hf_config = T.AutoConfig.from_pretrained(path, local_files_only=True)
        try:
            config_from_hf(hf_config)  # refuse early
        except (TypeError, AttributeError, KeyError) as err:  # a value of the wrong type
            raise ValueError(
                f"config.json: a value of an unexpected type or a missing entry "
                f"({type(err).__name__}: {err})"
            ) from err
        hf, info = T.AutoModelForCausalLM.from_pretrained(
            path,
            local_files_only=True,
            dtype="auto" if dtype is None else dtype,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
    check_loading_info(info)
    ours = from_hf(hf, impl)
    return ours, (hf if keep_hf else None)


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


def eos_token_ids(path: str, tokenizer=None) -> list[int] | None:
    """Every end-of-sequence id a checkpoint declares, first seen first: its generation config
    (``generation_config.json``, what ``transformers``' ``generate`` stops at; Llama 3's
    instruct models list several), its model config, then the tokenizer's. None if none does."""
    T = _transformers()
    found: list[int] = []
    with _quiet(T):
        try:
            found += _ids(
                T.GenerationConfig.from_pretrained(path, local_files_only=True).eos_token_id
            )
        except OSError:  # no generation_config.json
            pass
        found += _ids(
            getattr(T.AutoConfig.from_pretrained(path, local_files_only=True), "eos_token_id", None)
        )
    found += _ids(getattr(tokenizer, "eos_token_id", None))
    return list(dict.fromkeys(found)) or None
