"""``generate_until`` for the attnbench lm-eval model: a batch of equal-length byte prompts
decoded through the model's incremental state (the prompt in one ``step``, then one byte
per ``step``), stopped per sequence at its first stop string or after ``max_new`` bytes.

A model without incremental decoding is run over its whole prefix for every new byte
instead; that slower path is logged once per model, never taken silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attnbench.nn.precision import autocast_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenSettings:
    """lm-eval generation kwargs, validated: stop strings, budget and sampling."""

    until: tuple[bytes, ...]
    max_new: int
    temperature: float  # 0 = greedy
    top_k: int | None
    seed: int

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any] | None, default_max: int, context: int) -> GenSettings:
        kwargs = dict(kwargs or {})
        until = kwargs.pop("until", None) or []
        if isinstance(until, str):
            until = [until]
        if not isinstance(until, (list, tuple)) or not all(isinstance(u, str) for u in until):
            raise ValueError(f"generate_until: 'until' must be a string or a list of strings, got {until!r}")
        max_new = int(kwargs.pop("max_gen_toks", default_max))
        if max_new < 1:
            raise ValueError(f"generate_until: max_gen_toks must be >= 1, got {max_new}")
        if max_new >= context:
            log.warning(
                "max_gen_toks %d leaves no room for a prompt in context %d; generating %d",
                max_new,
                context,
                context - 1,
            )
            max_new = context - 1
        do_sample = bool(kwargs.pop("do_sample", False))  # as in lm-eval's HF model: greedy unless asked
        temperature = float(kwargs.pop("temperature", 1.0))
        if temperature < 0:
            raise ValueError(f"generate_until: temperature must be >= 0, got {temperature}")
        top_k = kwargs.pop("top_k", None)
        seed = int(kwargs.pop("seed", 1234))
        if kwargs:
            log.warning("generate_until: ignoring generation kwargs %s", sorted(kwargs))
        return cls(
            tuple(u.encode("utf-8") for u in until if u),
            max_new,
            temperature if do_sample else 0.0,
            int(top_k) if top_k else None,
            seed,
        )

    def key(self) -> list[Any]:
        """Requests with equal settings are decoded together."""
        return [[u.hex() for u in self.until], self.max_new, self.temperature, self.top_k, self.seed]


def _first_stop(buf: bytes, until: tuple[bytes, ...]) -> int | None:
    hits = [i for i in (buf.find(u) for u in until) if i >= 0]
    return min(hits) if hits else None


def _pick(logits: torch.Tensor, s: GenSettings, gen: torch.Generator) -> torch.Tensor:
    """logits (B, V) -> next bytes (B,): argmax, or a draw at the given temperature / top-k."""
    logits = logits.float()  # (B, V) fp32 softmax
    if s.temperature == 0.0:
        return logits.argmax(dim=-1)  # (B,)
    logits = logits / s.temperature
    if s.top_k is not None:
        kth = torch.topk(logits, min(s.top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1).cpu()  # (B, V) drawn on CPU: same draws on any device
    return torch.multinomial(probs, 1, generator=gen)[:, 0].to(logits.device)  # (B,)


@torch.no_grad()
def generate_batch(
    model: Any,
    device: torch.device,
    prompts: list[list[int]],
    s: GenSettings,
    decode: Callable[[list[int]], str] | None = None,
) -> tuple[list[str], bool]:
    """Continuations of equal-length prompts, each cut before its first stop string, and
    whether the model's incremental state was used (False: whole prefix re-run per byte).
    ``decode`` turns token ids into text (None: the ids are UTF-8 bytes)."""
    as_bytes = bytes if decode is None else (lambda ids: decode(ids).encode("utf-8"))
    idx = torch.tensor(prompts, dtype=torch.long, device=device)  # (B, P)
    B, P = idx.shape
    gen = torch.Generator().manual_seed(s.seed)
    try:
        state = model.init_state(B, P + s.max_new, device=device)
    except NotImplementedError:
        state = None
    seq = idx  # (B, P + generated so far), only used without incremental state
    with autocast_for(device):
        logits, state = model.step(idx, state) if state is not None else (model(idx).logits, None)  # (B, P, V)
    bufs: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    for i in range(s.max_new):
        nxt = _pick(logits[:, -1], s, gen)  # (B,)
        for b, tok in enumerate(nxt.tolist()):
            if not done[b]:
                bufs[b].append(tok)
                done[b] = _first_stop(as_bytes(bufs[b]), s.until) is not None
        if all(done) or i + 1 == s.max_new:
            break
        with autocast_for(device):
            if state is not None:
                logits, state = model.step(nxt[:, None], state)  # (B, 1, V)
            else:
                seq = torch.cat([seq, nxt[:, None]], dim=1)  # (B, P + i + 1)
                logits = model(seq).logits  # (B, P + i + 1, V)
    out = []
    for buf in bufs:
        text = as_bytes(buf)
        cut = _first_stop(text, s.until)
        out.append(text[:cut].decode("utf-8", errors="replace"))
    return out, state is not None
