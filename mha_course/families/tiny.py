"""Chapter 20: tiny random models of every family, built by ``transformers`` itself (its own
config classes, 3 layers, 4 heads, width 32) — what the tests and the chapter convert.

Nothing is downloaded: the configs are written here and the weights are random. Every weight
(the norms' too) is moved off its initial value, so a conversion that drops one shows.
"""

from __future__ import annotations

import torch

VOCAB = 64
_KW = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def _transformers():
    try:
        import transformers
    except ImportError as err:
        raise ImportError(
            "chapter 20 needs the hf extra: pip install -e '.[hf]' (transformers and safetensors)"
        ) from err
    return transformers


def tiny_hf_config(family: str, **changes):
    """A ``transformers`` config of ``family`` (one of :data:`~mha_course.families.FAMILIES`):
    GQA with G = 2 of H = 4, windows of W = 5 (Mistral; alternate layers in Gemma 2), both
    soft-caps small enough to act without flattening the scores and a query scale that is not
    1/sqrt(D) (Gemma 2), MLA with all layers dense (DeepSeek V3). ``changes`` are set on the
    config (e.g. ``use_sliding_window=True``)."""
    T = _transformers()
    classes = {
        "gpt2": T.GPT2Config,
        "llama": T.LlamaConfig,
        "qwen2": T.Qwen2Config,
        "qwen3": T.Qwen3Config,
        "mistral": T.MistralConfig,
        "gemma2": T.Gemma2Config,
        "deepseek_v3": T.DeepseekV3Config,
        "gemma3_text": T.Gemma3TextConfig,
        "olmo2": T.Olmo2Config,
        "phi3": T.Phi3Config,
    }
    if family not in classes:
        raise ValueError(f"family: expected one of {tuple(classes)}, got {family!r}")
    if family == "gpt2":
        kwargs = dict(
            vocab_size=VOCAB,
            n_positions=64,
            n_embd=32,
            n_layer=3,
            n_head=4,
            bos_token_id=0,
            eos_token_id=0,
        )
    elif family == "gemma2":
        kwargs = dict(
            _KW,
            head_dim=16,
            sliding_window=5,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=1.0,
            final_logit_softcapping=2.0,
        )
    elif family == "gemma3_text":  # local, local, global (5:1 in the real models)
        kwargs = dict(
            _KW,
            head_dim=16,
            sliding_window=5,
            query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        )
    elif family in ("olmo2", "phi3"):
        kwargs = dict(_KW, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    elif family == "deepseek_v3":
        kwargs = dict(
            _KW,
            num_key_value_heads=4,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=12,
            first_k_dense_replace=3,
            moe_intermediate_size=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
        )
    else:
        kwargs = dict(
            _KW, **{"qwen3": {"head_dim": 16}, "mistral": {"sliding_window": 5}}.get(family, {})
        )
    return classes[family](**{**kwargs, **changes})


def tiny_hf_model(family: str, dtype: torch.dtype = torch.float64, **changes):
    """A random ``transformers`` causal LM of ``family`` in eval mode (seeded by its name)."""
    T = _transformers()
    config = tiny_hf_config(family, **changes)
    attn = "eager" if family in ("gemma2", "gemma3_text") else "sdpa"  # Gemma's soft-cap: eager
    g = torch.Generator().manual_seed(sum(map(ord, family)))
    with torch.random.fork_rng():  # transformers initialises from the global generator
        torch.manual_seed(0)
        model = T.AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.to(dtype).eval()


def tokenizer_corpus(lines: int = 2000) -> list[str]:
    """Python-like lines from a fixed vocabulary and a seeded generator: the tiny tokenizer's
    training text. (It was the course's own source, so moving a file changed every tiny
    checkpoint's tokens.)"""
    import random

    rng = random.Random(0)
    words = (
        "def class return self cache key value query mask torch import from for in if else "
        "None True False attention head heads layer model logits tokens position scale "
        "softmax weights batch length window block pool"
    ).split()
    names = [a + "_" + b for a in words[5:20] for b in words[20:]]
    out = []
    for _ in range(lines):
        n = rng.randint(2, 8)
        body = ", ".join(rng.choice(names) for _ in range(n))
        out.append(
            f"{rng.choice(words)} {rng.choice(names)}({body}):  # {rng.choice(words)} {rng.randint(0, 99)}\n"
        )
    return out


def save_tiny_checkpoint(
    folder, family: str = "mistral", vocab_from_tokenizer: bool = True
) -> None:
    """A ``save_pretrained`` folder: a tiny random model of ``family`` and a byte-level BPE
    tokenizer of 300 tokens trained on :func:`tokenizer_corpus` (made by the code: nothing
    downloaded, and unchanged when the course's own source changes). ``vocab_from_tokenizer=False`` keeps the model's vocabulary of
    :data:`VOCAB` = 64, smaller than the tokenizer's (a mismatched pair)."""

    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    T = _transformers()
    text = tokenizer_corpus()
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    T.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    config = tiny_hf_config(family)
    if vocab_from_tokenizer:
        config.vocab_size = tok.get_vocab_size()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        T.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
