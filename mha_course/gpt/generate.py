"""Chapter 13: sampling text from the model — temperature, top-k, and the KV cache.

One step: logits of the last position -> divide by the temperature -> keep the ``top_k``
largest -> softmax -> draw one id. With the cache the prompt is run once (prefill) and each
new id costs one position's work; without it every step re-runs the whole context.

A model with learned positions cannot look further back than ``context_length`` ids. When the
context is full, both paths keep its last ``context_length // 2`` ids and carry on from there
(the cached path re-fills its cache with them), so the two paths draw the same text.
"""

from __future__ import annotations

import torch

from mha_course.gpt.model import GPT


def sampling_distribution(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None
) -> torch.Tensor:
    """The distribution one sampling step draws from: ``softmax(top_k(logits / temperature))``.

    Dividing by a temperature below 1 sharpens the distribution, above 1 flattens it; top-k sets
    every logit below the k-th largest to -inf (probability exactly 0).

    Shape:
        logits: (B, V). Returns (B, V) probabilities, each row summing to 1.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits: expected shape (B, V), got {tuple(logits.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature: expected > 0 (use argmax for greedy), got {temperature}")
    logits = logits / temperature
    if top_k is not None:
        if top_k <= 0:
            raise ValueError(f"top_k: expected a positive int or None, got {top_k}")
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))  # below the k-th: never drawn
    return torch.softmax(logits, dim=-1)  # (B, V)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One sampling step. ``temperature == 0`` is greedy (argmax).

    Shape:
        logits: (B, V) for the last position. Returns (B, 1) int64.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits: expected shape (B, V), got {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature: expected >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = sampling_distribution(logits.float(), temperature, top_k)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


@torch.no_grad()
def generate(
    model: GPT,
    prompt: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    caches: list | None = None,
) -> torch.Tensor:
    """Continue ``prompt`` by ``max_new_tokens`` sampled ids.

    ``use_cache=False`` re-runs the whole context at every step (the slow reference);
    ``caches`` may be given (e.g. :meth:`GPT.new_caches` with ``static=True``).

    Shape:
        prompt: (B, P) int64, P >= 1. Returns (B, P + max_new_tokens).
    """
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"prompt: expected shape (B, P) with P >= 1, got {tuple(prompt.shape)}")
    was_training = model.training
    # eval() and train() walk every module, each __setattr__ slow: a fifth of a short
    # generation's time; skipped when every module is in evaluation already (a no-op then)
    switch = any(m.training for m in model.modules())
    if switch:
        model.eval()
    T = model.config.context_length
    keep = max(1, T // 2)
    B, P = prompt.shape
    ids = prompt.new_empty(B, P + max_new_tokens)  # written in place, one column per step
    ids[:, :P] = prompt
    n = P  # ids filled so far
    start = max(0, n - T)  # first id of the current context window
    if use_cache:
        caches = model.new_caches() if caches is None else caches
        for c in caches:
            c.reset()
        logits = model(ids[:, start:n], caches=caches)[:, -1]  # prefill: (B, P, V) -> (B, V)
        plain = model.takes_plain_steps(caches)  # each step straight through the modules
    for i in range(max_new_tokens):
        if not use_cache:
            logits = model(ids[:, start:n])[:, -1]  # (B, context, V) -> (B, V)
        next_id = sample_next(logits, temperature, top_k, generator)  # (B, 1)
        ids[:, n : n + 1] = next_id
        n += 1
        if i == max_new_tokens - 1:
            break
        if n - start > T:  # the window is full: slide it
            start = n - keep
            if use_cache:
                for c in caches:
                    c.reset()
                logits = model(ids[:, start:n], caches=caches)[:, -1]  # re-fill: `keep` ids
        elif use_cache:  # one position, checked once above: (B, 1, V) -> (B, V)
            logits = model.decode_step(next_id, caches, plain)[:, -1]
    if switch:
        model.train(was_training)
    return ids
