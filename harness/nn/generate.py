"""Sampling through a model's incremental state: the prompt is consumed in one `step`,
then one token per `step`. Models without incremental decoding are refused, never
silently re-run over the whole prefix."""

from __future__ import annotations

import torch

from attnbench.nn.model import LanguageModel


@torch.no_grad()
def generate(
    model: LanguageModel,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """prompt (B, P) int64 -> (B, P + max_new_tokens). temperature 0 means greedy."""
    if prompt.dim() != 2 or prompt.size(1) == 0:
        raise ValueError("prompt must be a non-empty (batch, length) tensor of token ids")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    total = prompt.size(1) + max_new_tokens
    context = model.config.context
    if total > context:
        raise ValueError(f"prompt + new tokens = {total} exceeds the model context {context}")
    was_training = model.training
    model.eval()
    state = model.init_state(prompt.size(0), total, device=prompt.device)
    logits, state = model.step(prompt, state)  # (B, P, V)
    out = [prompt]
    for i in range(max_new_tokens):
        last = logits[:, -1].float()  # (B, V)
        if temperature == 0.0:
            nxt = last.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            last = last / temperature
            if top_k is not None:
                kth = torch.topk(last, min(top_k, last.size(-1)), dim=-1).values[:, -1:]  # (B, 1)
                last = last.masked_fill(last < kth, float("-inf"))
            probs = torch.softmax(last, dim=-1)  # (B, V)
            nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        out.append(nxt)
        if i + 1 < max_new_tokens:
            logits, state = model.step(nxt, state)  # (B, 1, V)
    model.train(was_training)
    return torch.cat(out, dim=1)
