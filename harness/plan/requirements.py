"""What a suite needs installed beyond the main install, checked before its first cell.

A package that a step needs only after training (a tokenizer, PEFT) would otherwise fail the
cell after minutes of compute; a run is refused at start instead, naming each missing package,
the experiment that needs it and the ``pip install`` line that brings it."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from attnbench.errors import MissingPackageError


@dataclass(frozen=True)
class Need:
    module: str  # the import name checked
    extra: str  # the attnbench extra that installs it
    why: str  # which experiment needs it, for what


def _options(experiment: Any) -> list[dict[str, Any]]:
    """Every variant option mapping an experiment sets: variant_options, and hybrid layers' own."""
    out = list(experiment.variant_options.values())
    for model in experiment.models:
        out += [options for _, options in model.layer_entries() or []]
    return out


def experiment_needs(experiment: Any) -> list[Need]:
    """The optional packages ``experiment`` (one validated suite entry) will import."""
    needs, name = [], experiment.name
    data = getattr(experiment, "data", None)
    tokenizer = getattr(data, "tokenizer", "bytes")
    if tokenizer in ("bpe", "pretrained"):
        needs.append(Need("tokenizers", "bpe", f"experiment {name!r}: tokenizer: {tokenizer}"))
    finetune = getattr(experiment, "finetune", None)
    if finetune is not None and getattr(finetune, "method", None) == "lora":
        needs.append(Need("peft", "lora", f"experiment {name!r}: finetune method: lora"))
    lm_eval = getattr(experiment, "lm_eval", None)
    if lm_eval is not None and getattr(lm_eval, "model", None) == "hf":
        # the checkpoint is exported (safetensors, a transformers config and tokenizer) and scored by
        # lm-eval's own hf model (transformers, accelerate)
        why = f"experiment {name!r}: lm_eval model: hf (export, then lm-eval's --model hf)"
        needs += [Need(module, "hf", why) for module in ("transformers", "safetensors", "accelerate", "tokenizers")]
    if any(options.get("kernel") == "fla" for options in _options(experiment)):
        needs.append(Need("fla", "fla", f"experiment {name!r}: kernel: fla"))
    return needs


def missing_packages(suite: Any) -> list[Need]:
    """The needs of ``suite``'s experiments whose package is not importable here."""
    needs = [need for experiment in suite.experiments for need in experiment_needs(experiment)]
    return [need for need in needs if importlib.util.find_spec(need.module) is None]


def require_packages(suite: Any) -> None:
    """Refuse, before any cell trains, a suite that needs a package this install lacks."""
    missing = missing_packages(suite)
    if not missing:
        return
    by_why: dict[str, list[str]] = {}
    for n in missing:
        by_why.setdefault(n.why, []).append(repr(n.module))
    lines = "; ".join(
        f"{why} needs the {modules[0]} package"
        if len(modules) == 1
        else f"{why} needs the packages {', '.join(modules)}"
        for why, modules in by_why.items()
    )
    extras = ",".join(dict.fromkeys(n.extra for n in missing))
    raise MissingPackageError(
        f"suite {suite.name!r} cannot run on this install: {lines}. Install it first: "
        f"pip install 'attnbench[{extras}]' -c constraints.txt (nothing was run or stored)"
    )
