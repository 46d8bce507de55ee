"""Rebuilding trained models from the checkpoints `train` cells keep.

A final checkpoint (written by ``attnbench.experiments.train.state.save_final``) is a dict::

    {"model": state_dict, "config": ModelConfig.to_dict() (options as a dict),
     "variant": name, "model_kind": "backbone" | "own", "cell_key": key, "step": int,
     "tokenizer": tokenizer.json text: the trained BPE, or a token-id task's ids
                  (``data.tokenizers.TokenIdsTokenizer``); absent for byte-level models}

It is read with ``torch.load(weights_only=True)``: tensors and plain values only, no code.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnbench.contract.config import ModelConfig
from attnbench.errors import CheckpointError, DiskFullError, UnknownVariantError
from attnbench.nn.backbone import Backbone
from attnbench.nn.model import LanguageModel, as_language_model
from attnbench.store.checkpoint_paths import checkpoint_candidates, locate_checkpoint

_REQUIRED = ("model", "config", "variant", "model_kind")


@dataclass(frozen=True)
class CheckpointMeta:
    """What a checkpoint says about the model it holds."""

    path: str
    variant: str
    model_kind: str
    config: dict[str, Any]
    cell_key: str | None
    step: int | None
    n_params: int
    tokenizer: str | None = None  # tokenizer.json (a trained BPE or a task's token ids); None: UTF-8 bytes


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise CheckpointError(
            f"checkpoint {path} does not exist; pass the path of a '<cell key>.pt' file from the "
            "store's checkpoints folder, or select a stored run with store=...,run=..."
        )
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory; pass the '.pt' file inside it")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for damaged files; all mean the same
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}: {first}); the file is "
            "truncated, corrupt or not a torch checkpoint. Re-run its training cell (delete the "
            "run from the store, then `attnbench run` the suite again) to write it afresh."
        ) from exc
    if not isinstance(payload, dict) or any(k not in payload for k in _REQUIRED):
        have = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"{path} is not an attnbench model checkpoint (it needs keys {list(_REQUIRED)}, "
            f"has {have}); resumable training states ('.state.pt') cannot be evaluated"
        )
    return payload


def _config(raw_config: dict[str, Any], variant: Any, path: str) -> ModelConfig:
    raw = dict(raw_config)
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise CheckpointError(f"{path}: unknown model config keys {unknown}")
    try:
        options = variant.make_options(raw.pop("options", None))
        return ModelConfig(**raw, options=options)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: its model config no longer validates for variant "
            f"{variant.name!r} ({exc}); the plugin's options changed since it was trained"
        ) from exc


def build_model(variant: Any, kind: str, raw_config: dict[str, Any], where: str) -> LanguageModel:
    """An untrained model of ``variant`` (``kind`` "backbone" or "own") from a stored config
    dict (``ModelConfig.to_dict()``); ``where`` names the source in error messages."""
    config = _config(raw_config, variant, where)
    if kind == "own":
        if variant.build_model is None:
            raise CheckpointError(f"{where}: variant {variant.name!r} no longer has a model of its own")
        return as_language_model(variant.build_model(config), variant.name)
    if kind == "backbone":
        return Backbone(config, variant.build_mixer)
    raise CheckpointError(f"{where}: model_kind {kind!r} is neither 'backbone' nor 'own'")


def load_checkpoint(path: str | Path, registry: Any) -> tuple[LanguageModel, CheckpointMeta]:
    """The trained model (on CPU, eval mode) and what the checkpoint says about it.

    Raises CheckpointError naming the file, what is wrong with it and how to fix it.
    """
    path = Path(path).expanduser()
    payload = _read(path)
    name = payload["variant"]
    try:
        variant = registry.get(name)
    except UnknownVariantError as exc:
        raise CheckpointError(
            f"checkpoint {path} holds a model of variant {name!r}, which no installed plugin "
            f"registers ({exc}). Install the plugin that provides it."
        ) from None
    model = build_model(variant, payload["model_kind"], payload["config"], f"checkpoint {path}")
    try:
        model.load_state_dict(payload["model"])
    except RuntimeError as exc:
        raise CheckpointError(
            f"checkpoint {path}: the weights do not fit variant {name!r} as installed now "
            f"({str(exc).splitlines()[0]}); its code changed since training. Re-train the cell."
        ) from exc
    model.eval()
    meta = CheckpointMeta(
        str(path.resolve()),
        name,
        payload["model_kind"],
        dict(payload["config"]),
        payload.get("cell_key"),
        payload.get("step"),
        model.num_params(),
        payload.get("tokenizer"),
    )
    return model, meta


def find_run(store: Any, run: str | int) -> dict[str, Any]:
    """A stored run by id, by full cell key, or by a unique cell-key prefix (8+ characters)."""
    text = str(run).strip()
    runs = store.runs()
    if text.isdigit():
        hits = [r for r in runs if r["id"] == int(text)]
    else:
        hits = [r for r in runs if r["cell_key"] == text]
        if not hits and len(text) >= 8:
            hits = [r for r in runs if r["cell_key"].startswith(text)]
    if len(hits) != 1:
        what = "no run" if not hits else f"{len(hits)} runs"
        raise CheckpointError(
            f"{what} in store {store.path} match run={text!r}; give a run id or a cell key "
            "(at least 8 characters) of a trained run"
        )
    return hits[0]


def run_checkpoint(store: Any, run: dict[str, Any]) -> Path:
    """The final checkpoint a stored train run kept.

    A recorded relative path is tried as given, then in the store's ``checkpoints`` folder
    (where ``attnbench run`` writes them), so a store moved with its folder still works.
    """
    recorded = (run.get("summary") or {}).get("checkpoint")
    if not recorded:
        raise CheckpointError(
            f"run {run['id']} ({run['experiment']}/{run['variant']}, status {run['status']}) kept "
            "no checkpoint: only finished train runs with train.checkpoint: true have one"
        )
    found = locate_checkpoint(store.path, recorded)
    if found is not None:
        return found
    candidates = checkpoint_candidates(store.path, recorded)
    raise CheckpointError(
        f"run {run['id']} recorded checkpoint {recorded}, but it is not there (also looked at "
        f"{candidates[1]}); the checkpoints folder was moved or deleted. Re-train the cell."
    )


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Atomic write: a crash leaves the old file or the new one, never half of one. The
    temporary name is unique to this process, so drivers sharing a folder never collide.
    A full disk (or quota) raises ``DiskFullError``."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:  # a file, not a path: torch's writer then keeps the OSError
            torch.save(payload, f)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:
        if _disk_full(exc):
            raise DiskFullError(path.parent) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)


def _disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or came from, a write that found the disk (or quota) full: torch
    raises "[enforce fail ...] unexpected pos" while handling the OSError."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
