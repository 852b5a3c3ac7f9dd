"""``mha-course generate --from-pretrained DIR``: run a Hugging Face checkpoint in the course's
own modules (chapter 20's FamilyLM and the course's KV caches) and print the text.

DIR is a folder as ``save_pretrained`` writes it (config.json, model.safetensors, and the
tokenizer's files); nothing is downloaded. Needs the ``[hf]`` extra (transformers).
"""

from __future__ import annotations

import argparse
import time

HELP = "continue a prompt with a transformers checkpoint run in the course's modules"
DTYPES = ("auto", "float32", "float64", "bfloat16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from-pretrained",
        required=True,
        metavar="DIR",
        help="a save_pretrained folder (safetensors + tokenizer); read locally",
    )
    parser.add_argument(
        "--prompt",
        default="def attention(q, k, v):",
        help="text to continue (default: %(default)r)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=32, metavar="N")
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default="auto",
        help="auto (default) keeps the checkpoint's dtype; the weights are held "
        "twice while they are copied into the course's model",
    )
    parser.add_argument(
        "--attention",
        default="sdpa",
        metavar="IMPL",
        help="the attention function every layer picks from the course's registry: sdpa "
        "(default, torch's fused kernel), eager (the course's, weights materialised), ...",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run transformers' own generate and say whether the tokens agree",
    )


def run(args: argparse.Namespace) -> int:
    """Every failure ends in one line, ``--from-pretrained DIR: <cause>`` (or the option at
    fault), and exit status 2; never a traceback."""
    import sys

    try:
        import torch
        from transformers import AutoTokenizer
    except ImportError:
        print(
            "mha-course generate needs the hf extra: pip install -e '.[hf]' "
            "(transformers, safetensors)",
            file=sys.stderr,
        )
        return 2
    if args.max_new_tokens < 0 or (args.compare and args.max_new_tokens == 0):
        need = (
            "an int >= 1 with --compare (0 new tokens leave nothing to compare)"
            if args.compare
            else "an int >= 0"
        )
        print(f"--max-new-tokens: expected {need}, got {args.max_new_tokens}", file=sys.stderr)
        return 2
    from mha_course.attention.functions import attention_function

    try:
        attention_function(args.attention)
    except ValueError as err:
        print(f"--attention: {str(err).removeprefix('impl: ')}", file=sys.stderr)
        return 2
    try:
        return _generate(args, torch, AutoTokenizer)
    except Exception as err:  # noqa: BLE001 - the command's contract: one line, exit 2
        cause = " ".join(str(err).split()) or type(err).__name__  # one line
        if len(cause) > 400:
            cause = cause[:400] + " ..."
        if not isinstance(err, (ValueError, OSError)):
            cause = f"{type(err).__name__}: {cause}"
        print(f"--from-pretrained {args.from_pretrained}: {cause}", file=sys.stderr)
        return 2


def _generate(args: argparse.Namespace, torch, AutoTokenizer) -> int:
    from mha_course.families import greedy_generate, load_pretrained
    from mha_course.families.compare import compare_greedy
    from mha_course.families.pretrained import eos_token_ids

    tokenizer = AutoTokenizer.from_pretrained(args.from_pretrained, local_files_only=True)
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    ours, hf = load_pretrained(
        args.from_pretrained, dtype, keep_hf=args.compare, impl=args.attention
    )
    prompt = tokenizer(args.prompt, return_tensors="pt").input_ids  # (1, P)
    V = ours.config.vocab_size
    if prompt.shape[1] == 0:
        raise ValueError(f"the prompt {args.prompt!r} gives no tokens; expected at least one")
    if int(prompt.max()) >= V:
        raise ValueError(
            f"the tokenizer gives ids up to {int(prompt.max())} for the prompt, "
            f"the model's vocabulary has V = {V} (config.json vocab_size): "
            f"expected a tokenizer of this checkpoint"
        )
    start = time.perf_counter()
    eos, pad = eos_token_ids(args.from_pretrained, tokenizer), tokenizer.pad_token_id
    out = greedy_generate(ours, prompt, args.max_new_tokens, eos, pad)
    seconds = time.perf_counter() - start
    print(tokenizer.decode(out[0], skip_special_tokens=True))
    n = out.shape[1] - prompt.shape[1]
    print(
        f"{ours.config.family}: {n} new tokens in {seconds:.2f} s "
        f"({n / max(seconds, 1e-9):.1f} tokens/s, greedy, course caches, "
        f"{next(ours.parameters()).dtype}, CPU threads "
        f"{torch.get_num_threads()})"
    )
    if args.compare:
        from transformers import GenerationConfig

        plain = GenerationConfig(
            max_new_tokens=args.max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=pad
        )  # greedy, no penalties
        theirs = hf.generate(prompt, generation_config=plain)
        agreement = compare_greedy(ours, hf, prompt.shape[1], out, theirs)
        print(agreement.line())  # a split at a tie (bfloat16) is reported, not failed
        return 0 if agreement.consistent else 1
    return 0
