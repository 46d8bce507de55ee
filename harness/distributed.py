"""Data-parallel training across processes started by ``torchrun`` (DDP).

``torchrun --nproc_per_node=N -m attnbench run SUITE`` starts N copies of the command with
WORLD_SIZE / RANK / LOCAL_RANK / MASTER_ADDR / MASTER_PORT set; ``session`` joins them
into one process group (NCCL on CUDA, gloo on CPU). Every helper here is the identity
in a single process, so code that calls them runs unchanged without torchrun.

The division of labour it supports: every rank trains (each on its shard of the global
batch, gradients averaged by DDP); rank 0 alone reads and writes the store, evaluates
and checkpoints, and decides what the others do (``main_value``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from attnbench.errors import DistributedError

T = TypeVar("T")
_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
TIMEOUT_ENV = "ATTNBENCH_DIST_TIMEOUT_S"  # how long a rank waits for the others (default 1 h)


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the process group."""

    world_size: int
    rank: int
    local_rank: int
    backend: str  # "nccl" or "gloo"
    device: torch.device  # the device this rank trains on (cuda:LOCAL_RANK on CUDA)


def requested() -> bool:
    """True when launched by torchrun with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1") or "1") > 1


def active() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def is_main() -> bool:
    """Rank 0, or the only process: the one that writes the store and checkpoints."""
    return rank() == 0


def backend() -> str | None:
    return str(dist.get_backend()) if active() else None


def _rank_device(device: torch.device, local_rank: int) -> torch.device:
    if device.type != "cuda":
        return device
    if device.index is not None and device.index != local_rank:
        raise DistributedError(
            f"device {device} was requested, but under torchrun each process uses the GPU of its "
            f"LOCAL_RANK (this one: cuda:{local_rank}); pass --device cuda, and choose GPUs with "
            "CUDA_VISIBLE_DEVICES"
        )
    if local_rank >= torch.cuda.device_count():
        raise DistributedError(
            f"LOCAL_RANK {local_rank} has no GPU: {torch.cuda.device_count()} visible; start no more "
            "processes per node (--nproc_per_node) than there are GPUs"
        )
    return torch.device("cuda", local_rank)


def init_from_env(device: torch.device) -> DistInfo:
    """Join the process group torchrun described in the environment.

    Raises DistributedError when the environment is incomplete or the group cannot form;
    never falls back to a single process.
    """
    missing = [k for k in _ENV if not os.environ.get(k)]
    if missing:
        raise DistributedError(
            f"WORLD_SIZE={os.environ.get('WORLD_SIZE')} asks for data-parallel training, but "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set; launch with "
            "`torchrun --nproc_per_node=N -m attnbench run SUITE`"
        )
    if not dist.is_available():
        raise DistributedError("this torch build has no torch.distributed; data-parallel training needs it")
    world, rank_, local = (int(os.environ[k]) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))
    dev = _rank_device(device, local)
    name = "nccl" if dev.type == "cuda" else "gloo"
    if name == "nccl":
        torch.cuda.set_device(dev)
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "3600")))
    try:
        dist.init_process_group(name, timeout=timeout)
    except Exception as exc:
        raise DistributedError(
            f"could not join the {name} process group as rank {rank_} of {world} "
            f"(MASTER_ADDR={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return DistInfo(world, rank_, local, name, dev)


@contextlib.contextmanager
def session(device: torch.device) -> Iterator[DistInfo | None]:
    """The process group for a command's lifetime when torchrun asked for one, else None."""
    if not requested():
        yield None
        return
    info = init_from_env(device)
    try:
        yield info
    finally:
        dist.destroy_process_group()


# -- collectives (identity in a single process) ---------------------------------------


def main_value(compute: Callable[[], T]) -> T:
    """``compute()`` run on rank 0 alone, its value on every rank (what only rank 0 can read)."""
    if not active():
        return compute()
    box: list[Any] = [compute() if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather(obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not active():
        return [obj]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def global_mean(value: torch.Tensor) -> float:
    """A scalar averaged over the ranks (each rank holds the mean over its equal shard)."""
    if not active():
        return value.item()
    v = value.detach().float().clone().reshape(1)
    dist.all_reduce(v, op=dist.ReduceOp.SUM)
    return (v / dist.get_world_size()).item()


def slowest(seconds: float) -> float:
    """The largest of the ranks' values: a step takes as long as its slowest rank, and
    every rank then holds the same elapsed time, so time-based decisions agree."""
    if not active():
        return seconds
    device = torch.device("cuda", torch.cuda.current_device()) if backend() == "nccl" else None
    v = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    return float(v.item())


def barrier() -> None:
    if active():
        dist.barrier()


# -- data-parallel training ------------------------------------------------------------


def local_batch_size(global_batch: int, world: int | None = None) -> int:
    """Rows of a global batch each rank trains on; raises when they do not divide evenly."""
    world = world_size() if world is None else world
    if global_batch % world:
        raise DistributedError(
            f"batch_size {global_batch} is the global batch and must divide evenly over the "
            f"{world} processes; use a multiple of {world} (or another --nproc_per_node)"
        )
    return global_batch // world


def shard(*batch: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """This rank's contiguous rows of each (B, ...) tensor of a global batch: the shards of
    all ranks together are exactly the batch a single process trains on."""
    if not active():
        return batch
    n = local_batch_size(batch[0].size(0))
    start = rank() * n
    return tuple(t[start : start + n] for t in batch)


def wrap_model(model: nn.Module, device: torch.device) -> nn.Module:
    """The module to train through: DDP around ``model`` in a process group (gradients
    averaged over ranks in backward), ``model`` itself otherwise."""
    if not active():
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)
