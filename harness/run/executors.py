"""Where a suite's cells run: in this process, in a local process pool (``run.pool``), or
fanned out as Ray tasks.

The runner decides what runs (cells already stored are skipped, the trust gate runs
first) and stores what comes back; an executor only runs ``Task``s and hands back their
values as they finish. The driver alone writes the store, so it stays consistent
whichever executor ran the cells. Ray is imported only when asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnbench.errors import ExecutorError

EXECUTORS = ("local", "ray")
JOBS_ENV = "ATTNBENCH_JOBS"  # the default of --jobs when it is not given (run.pool reads it)
RAY_OBJECT_STORE_BYTES = 256 * 1024**2  # cells send back small records: keep Ray's shared memory small


@dataclass(frozen=True)
class Task:
    """One unit of work: ``fn(*args)``, where fn is a module-level function (so a worker
    process can import it) and args are picklable values."""

    key: str  # unique among the tasks in flight (a cell key)
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    driver_kwargs: dict[str, Any] = field(default_factory=dict)  # added when run in this process
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    retries: int = 0  # re-runs after the executor failed to run it (a worker died, ...)
    on_driver: bool = False  # run in this process (with driver_kwargs) even on a remote executor


@dataclass
class Finished:
    """A task's value, or why the executor could not produce one."""

    task: Task
    value: Any = None
    error: str | None = None  # set when the task failed in the executor after all retries
    attempts: int = 1
    started_at: float = 0.0
    finished_at: float = 0.0
    worker: dict[str, Any] | None = None  # what ran it: executor, process id, torch threads


@dataclass(frozen=True)
class WorkerDeath:
    """A worker process that died, and what it took with it: the attempts it was running
    (each an attempt of its cell, stored as such) and the tasks in flight beside it, which
    run again without using a retry."""

    how: str  # "SIGKILL", "exit code 1"
    killed: list[Finished]  # error set; value None; a task that runs again is in ``again``
    again: list[str]  # keys of the killed tasks that run again
    interrupted: list[Task]


def run_here(task: Task, attempts: int = 1) -> Finished:
    """Run ``task`` in this process (the driver)."""
    import torch

    started = time.time()
    value = task.fn(*task.args, **task.driver_kwargs)
    worker = {"executor": "in-process", "pid": os.getpid(), "threads": torch.get_num_threads()}
    return Finished(task, value, None, attempts, started, time.time(), worker)


class Executor(ABC):
    """Runs tasks; ``submit`` and ``drain`` return the tasks finished so far, in the
    order they finished, each exactly once."""

    name: str = ""
    remote: bool = False  # True when tasks run where GPUs are renumbered (a Ray worker sees its GPU as cuda:0)
    shares_machine: bool = False  # True when several tasks run at once on this machine (a local pool)

    @abstractmethod
    def submit(self, task: Task) -> list[Finished]:
        """Start ``task``; return the tasks that finished meanwhile (maybe none)."""

    def drain(self) -> list[Finished]:
        """Wait for every task in flight; return them."""
        return []

    def deaths(self) -> list[WorkerDeath]:
        """The worker deaths since the last call, oldest first (before the ``Finished`` of the
        tasks they failed)."""
        return []

    @abstractmethod
    def close(self) -> None:
        """Release what the executor started (worker processes, a Ray instance, tasks in flight)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcessExecutor(Executor):
    """Each task runs to completion in this process when it is submitted."""

    name = "in-process"

    def submit(self, task: Task) -> list[Finished]:
        return [run_here(task)]

    def close(self) -> None:
        """Nothing to release: every task ran to completion in this process."""


def _ray_call(fn: Callable[..., Any], args: tuple[Any, ...], num_cpus: float) -> tuple[Any, dict[str, Any]]:
    """What a Ray worker runs: ``fn(*args)`` with torch using the CPUs the task reserved."""
    import ray
    import torch

    torch.set_num_threads(max(1, int(num_cpus)))
    info = {
        "executor": "ray",
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "node": ray.get_runtime_context().get_node_id(),
    }
    return fn(*args), info


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError("--executor ray needs Ray, which is not installed: pip install 'attnbench[ray]'") from exc
    return ray


class RayExecutor(Executor):
    """Tasks as Ray tasks with their resource needs (CPUs, GPUs), retried when a worker
    fails. Starts a small local Ray instance unless ``address`` names a running cluster
    (or Ray is already initialised in this process, which is then left running)."""

    name = "ray"
    remote = True

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        ray = import_ray()
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
            if address:
                kwargs["address"] = address
            else:  # a fresh instance on this machine, sized to it, never someone else's cluster
                kwargs.update(
                    address="local",
                    num_cpus=num_cpus or os.cpu_count() or 1,
                    object_store_memory=RAY_OBJECT_STORE_BYTES,
                )
            try:
                ray.init(**kwargs)
            except Exception as exc:
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise ExecutorError(f"could not start or reach {where}: {type(exc).__name__}: {exc}") from exc
        self.address = address or "local"
        # What the instance we started has: a task asking for more would wait forever.
        self._capacity = ray.cluster_resources() if self._owned and not address else None
        self._remote = ray.remote(_ray_call)
        self._pending: dict[Any, tuple[Task, int, float]] = {}  # ref -> (task, attempt, started)

    def _launch(self, task: Task, attempt: int, started: float | None = None) -> None:
        for resource, need, fix in (
            ("CPU", task.num_cpus, "lower the suite's cpus_per_cell"),
            ("GPU", task.num_gpus, "run with --device cpu"),
        ):
            have = (self._capacity or {}).get(resource, 0.0)
            if self._capacity is not None and need > have:
                raise ExecutorError(
                    f"a cell needs {need:g} {resource}(s) but the local Ray instance has {have:g}; "
                    f"{fix}, or pass --address of a Ray cluster that has them"
                )
        ref = self._remote.options(
            num_cpus=task.num_cpus,
            num_gpus=task.num_gpus,
            max_retries=0,
            name=f"cell-{task.key[:12]}",
        ).remote(task.fn, task.args, task.num_cpus)
        self._pending[ref] = (task, attempt, started if started is not None else time.time())

    def submit(self, task: Task) -> list[Finished]:
        if task.on_driver:
            return [run_here(task)]
        self._launch(task, 1)
        return self._collect(block=False)

    def drain(self) -> list[Finished]:
        done: list[Finished] = []
        while self._pending:
            done += self._collect(block=True)
        return done

    def _collect(self, block: bool) -> list[Finished]:
        if not self._pending:
            return []
        refs = list(self._pending)
        ready, _ = self._ray.wait(refs, num_returns=1 if block else len(refs), timeout=None if block else 0)
        done = []
        for ref in ready:
            task, attempt, started = self._pending.pop(ref)
            try:
                value, info = self._ray.get(ref)
                done.append(Finished(task, value, None, attempt, started, time.time(), info))
            except self._ray.exceptions.RayError as exc:
                if attempt <= task.retries:
                    self._launch(task, attempt + 1, started)
                    continue
                first = (str(exc).strip().splitlines() or [""])[0]
                error = f"ray task failed after {attempt} attempt(s): {type(exc).__name__}: {first}"
                done.append(Finished(task, None, error, attempt, started, time.time()))
        return done

    def close(self) -> None:
        for ref in list(self._pending):  # interrupted: stop what still runs
            with contextlib.suppress(Exception):  # it may have finished meanwhile; nothing to stop
                self._ray.cancel(ref, force=True)
        self._pending.clear()
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
