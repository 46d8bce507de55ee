"""Which weights a fine-tuning cell trains: LoRA adapters from PEFT on the targeted Linear
layers (everything else frozen), or every weight (``method: full``).

PEFT's ``inject_adapter_in_model`` works on any ``nn.Module``: it swaps each named Linear
for a LoRA layer W x + (alpha / r) B A x with A (r, in), B (out, r) = 0 at the start, so
the tuned model begins exactly at the checkpoint.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from torch import nn

from attnbench.errors import FinetuneError


def target_names(model: nn.Module, target: str | list[str]) -> list[str]:
    """Full names of the Linear layers ``target`` selects; raises FinetuneError when none.

    "mixer": Linear layers inside each block's token mixer; "linear": every Linear layer
    except an output head tied to the embedding; a list: modules whose name ends with an entry.
    """
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) and id(m.weight) not in tied}
    if target == "mixer":
        names = [n for n in linears if ".mixer." in f".{n}."]
    elif target == "linear":
        names = list(linears)
    else:
        names = [n for n in linears if any(n == t or n.endswith("." + t) for t in target)]
    if not names:
        raise FinetuneError(
            f"target {target!r} matches no Linear layer of this model; its Linear layers are "
            f"{sorted(linears)}: use 'mixer', 'linear' or name some of these"
        )
    return names


def capped_ranks(model: nn.Module, names: list[str], rank: int) -> dict[str, int]:
    """Targeted layers too small for ``rank``: name -> min(out, in), the largest rank an update
    of that matrix has. LoRA gives those layers that rank (a full-rank update of a small
    matrix, such as DeltaNet's (H x d) beta projection); the cell records them."""
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    out = {}
    for name in names:
        m = linears[name]  # target_names picks Linear layers only
        if rank > min(m.in_features, m.out_features):
            out[name] = min(m.in_features, m.out_features)
    return out


def _import_peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise FinetuneError(
            f"method: lora needs PEFT: pip install 'attnbench[lora]' -c constraints.txt ({exc})"
        ) from None
    return peft


M = TypeVar("M", bound=nn.Module)


def add_lora(model: M, names: list[str], rank: int, alpha: float | None, from_scratch: bool) -> M:
    """LoRA adapters of rank ``rank`` on ``names`` (a layer smaller than that: its full rank,
    ``capped_ranks``); only they train (from scratch: the targeted matrices stay frozen at
    their initial values and every other weight trains)."""
    peft = _import_peft()
    capped = capped_ranks(model, names, rank)  # smaller layers: their full rank, alpha / r kept
    scale = (alpha if alpha is not None else 2 * rank) / rank
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=scale * rank,
        target_modules=names,
        lora_dropout=0.0,
        bias="none",
        rank_pattern={re.escape(n): r for n, r in capped.items()},
        alpha_pattern={re.escape(n): scale * r for n, r in capped.items()},
    )
    peft.inject_adapter_in_model(config, model)  # in place: LoRA layers replace the targeted Linear layers
    frozen = {f"{n}.base_layer.{p}" for n in names for p in ("weight", "bias")}
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name or (from_scratch and name not in frozen)
    return model


def trainable_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
