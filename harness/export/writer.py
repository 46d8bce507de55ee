"""`attnbench export CHECKPOINT OUT_DIR`: a trained checkpoint as a Hugging Face model folder.

    config.json              model_type attnbench, the variant, its options, the model config,
                             provenance (attnbench and plugin versions, source hashes), auto_map
    model.safetensors        the attnbench model's weights under ``model.``
    tokenizer.json, tokenizer_config.json, special_tokens_map.json
    configuration_attnbench.py, modeling_attnbench.py   the remote code (trust_remote_code)

The folder is written beside OUT_DIR and renamed into place: an interrupted export leaves
no half-written model, and an existing non-empty OUT_DIR is never overwritten silently.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata as md
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attnbench
from attnbench.errors import ExportError
from attnbench.nn.checkpoint import CheckpointMeta, load_checkpoint
from attnbench.registry.identity import variant_identity

REMOTE = Path(__file__).with_name("remote")
REMOTE_FILES = ("configuration_attnbench.py", "modeling_attnbench.py")
AUTO_MAP = {
    "AutoConfig": "configuration_attnbench.AttnbenchConfig",
    "AutoModelForCausalLM": "modeling_attnbench.AttnbenchForCausalLM",
}


@dataclass(frozen=True)
class ExportInfo:
    out_dir: Path
    variant: str
    tokenizer: str  # "bytes", "trained" or "token-ids"
    n_params: int
    cell_key: str | None = None  # the train cell the checkpoint came from


def _hf_modules() -> tuple[Any, Any]:
    try:
        import safetensors.torch

        transformers = importlib.import_module("transformers")  # by name: see tests/test_tooling.py
    except ImportError as exc:
        raise ExportError(
            f"export needs the Hugging Face extra ({exc.name} is missing): pip install 'attnbench[hf]'"
        ) from None
    return transformers, safetensors.torch


def _versions(distribution: str) -> dict[str, str]:
    out = {"attnbench": attnbench.__version__}
    for name in ("torch", "transformers", distribution):
        with contextlib.suppress(md.PackageNotFoundError, ValueError):
            out[name] = md.version(name) if name else ""
    return out


def _config(meta: CheckpointMeta, variant: Any, tokenizer: str) -> Any:
    from attnbench.export.remote.configuration_attnbench import AttnbenchConfig

    provenance = {
        "versions": _versions(variant.distribution),
        "variant": variant_identity(variant),
        "checkpoint": meta.path,
        "cell_key": meta.cell_key,
        "step": meta.step,
        "n_params": meta.n_params,
        "tokenizer": tokenizer,
    }
    config = AttnbenchConfig(
        variant=meta.variant,
        model_kind=meta.model_kind,
        attnbench_config=meta.config,
        plugin_distribution=variant.distribution,
        provenance=provenance,
        architectures=["AttnbenchForCausalLM"],
    )
    config.auto_map = dict(AUTO_MAP)
    return config


def _target(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir} exists and is a file; give a folder path for the export")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise ExportError(
            f"{out_dir} already exists and is not empty; choose a new folder or pass --overwrite to replace it"
        )


def export_checkpoint(
    checkpoint: str | Path, out_dir: str | Path, registry: Any, overwrite: bool = False
) -> ExportInfo:
    """Write the Hugging Face folder of ``checkpoint`` at ``out_dir`` (see the module docstring)."""
    from attnbench.export.tokenizer import write_tokenizer

    _, st = _hf_modules()
    out_dir = Path(out_dir).expanduser().resolve()
    _target(out_dir, overwrite)
    model, meta = load_checkpoint(checkpoint, registry)
    variant = registry.get(meta.variant)
    if meta.tokenizer is None and int(meta.config.get("vocab_size", 256)) != 256:
        raise ExportError(
            f"checkpoint {meta.path} embeds {meta.config['vocab_size']} tokens but keeps no "
            "tokenizer (it predates checkpoints keeping them); re-train it to export it"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        used = write_tokenizer(tmp, meta.tokenizer, int(meta.config["context"]))
        _config(meta, variant, used["kind"]).save_pretrained(str(tmp))
        weights = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
        st.save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name in REMOTE_FILES:
            shutil.copyfile(REMOTE / name, tmp / name)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return ExportInfo(out_dir, meta.variant, used["kind"], meta.n_params, meta.cell_key)
