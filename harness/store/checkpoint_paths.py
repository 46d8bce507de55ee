"""Where a stored run's checkpoint file is: the path it recorded, else the same file name in
the ``checkpoints`` folder beside the store (so a store moved with its folder still works)."""

from __future__ import annotations

from pathlib import Path

CHECKPOINTS_FOLDER = "checkpoints"


def checkpoint_candidates(store_path: str | Path, recorded: str) -> list[Path]:
    """The places a recorded checkpoint may be, in the order they are tried."""
    return [Path(recorded), Path(store_path).parent / CHECKPOINTS_FOLDER / Path(recorded).name]


def locate_checkpoint(store_path: str | Path, recorded: str | None) -> Path | None:
    """The checkpoint file a run recorded, resolved; None when it recorded none or the file is gone."""
    if not recorded:
        return None
    return next((p.resolve() for p in checkpoint_candidates(store_path, recorded) if p.is_file()), None)
