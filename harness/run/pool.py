"""Cells in parallel on this machine's cores: ``attnbench run --jobs N``.

Workers are spawned, not forked (forking after torch started its threads is unsafe), each
with one torch thread; the driver still gates, stores and prints. A worker that dies costs the
cell it was running one attempt (each worker notes which task it runs, so the cells in flight
beside it run again at no cost); Ctrl-C stops the workers."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import io
import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attnbench.contract.variant import Variant
from attnbench.errors import ExecutorError, UnknownVariantError
from attnbench.registry.identity import variant_identity
from attnbench.registry.loader import Registry, load_registry
from attnbench.run.executors import JOBS_ENV, Executor, Finished, Task, WorkerDeath, run_here
from attnbench.store.provenance import content_key

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
POOL = "process-pool"


def cores() -> int:
    """The cores this process may run on (its affinity mask), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_jobs(device_type: str) -> int:
    """--jobs when not given: ATTNBENCH_JOBS, else one worker per core on CPU, one on a GPU."""
    raw = os.environ.get(JOBS_ENV)
    if raw is not None:
        try:
            jobs = int(raw)
        except ValueError:
            jobs = 0
        if jobs < 1:
            raise ExecutorError(f"{JOBS_ENV}={raw!r} is not a number of workers; set it to 1 or more, or unset it")
        return jobs
    return cores() if device_type == "cpu" else 1


@contextlib.contextmanager
def _thread_env(threads: int) -> Iterator[None]:
    """Thread counts in the environment while workers are spawned: a child reads them when it
    imports torch, before any code of ours runs in it."""
    saved = {k: os.environ.get(k) for k in THREAD_ENV}
    os.environ.update({k: str(threads) for k in THREAD_ENV})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Pickler(pickle.Pickler):
    """Sends the registry and its variants by reference: plugins may register lambdas, which
    do not pickle, so a worker loads the plugins itself and the variants' identities must match."""

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, Registry):
            return ("registry",)
        if isinstance(obj, Variant):
            return ("variant", obj.name, content_key(variant_identity(obj)))
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        registry = _worker_registry()
        if pid[0] == "registry":
            return registry
        _, name, identity = pid
        try:
            variant = registry.get(name)  # a hybrid is rebuilt from its name
        except UnknownVariantError:
            variant = None
        if variant is None or content_key(variant_identity(variant)) != identity:
            found = "does not register it" if variant is None else "registers other code under that name"
            raise ExecutorError(
                f"variant {name!r}: the plugins a worker process loads {found} (registered in the "
                "driver only, or changed on disk during the run); run with --jobs 1"
            )
        return variant


@functools.lru_cache(maxsize=1)
def _worker_registry() -> Registry:
    return load_registry()  # the installed plugins, limited by ATTNBENCH_PLUGINS as in the driver


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf).dump(obj)
    return buf.getvalue()


def _init_worker(threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the driver, which stops the workers
    parent = multiprocessing.parent_process()
    if parent is not None:  # the driver was killed: stop rather than train on for no one
        threading.Thread(target=lambda: (parent.join(), os._exit(1)), daemon=True).start()
    import torch

    torch.set_num_threads(threads)


def _call(blob: bytes, ticket: str) -> tuple[Any, dict[str, Any]]:
    """What a worker runs: the task, unpickled here (with the plugins this worker loaded),
    and who ran it. The ticket file says which worker took the task, should that one die."""
    with contextlib.suppress(OSError):  # without it a death is blamed on every task in flight
        Path(ticket).write_text(str(os.getpid()))
    fn, args = _Unpickler(io.BytesIO(blob)).load()
    import torch

    info = {"executor": POOL, "pid": os.getpid(), "threads": torch.get_num_threads()}
    return fn(*args), info


@dataclass
class _Entry:
    task: Task
    blob: bytes
    attempt: int = 1
    started: float = 0.0  # of the first attempt
    alone: bool = False  # runs with nothing else in flight: one of several suspects of a worker death
    ticket: str = ""  # the file the worker that takes it writes its process id to
    attempt_started: float = 0.0


def _how(code: int) -> str:
    """A worker's exit code in words: the signal that ended it, or the code it exited with."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class ProcessPoolCellExecutor(Executor):
    """At most ``jobs`` tasks at once, each in a spawned worker with ``threads`` torch
    threads; ``submit`` waits for a free worker, so the driver gates the next variant while
    the workers train. Tasks marked ``on_driver`` run in this process."""

    name = POOL
    shares_machine = True

    def __init__(self, jobs: int, threads: int = 1) -> None:
        if jobs < 1 or threads < 1:
            raise ExecutorError(f"--jobs needs at least one worker and one thread, got {jobs} x {threads}")
        self.jobs, self.threads = jobs, threads
        self._pool: cf.ProcessPoolExecutor | None = None
        self._queue: deque[_Entry] = deque()  # waiting for a worker
        self._running: dict[cf.Future, _Entry] = {}
        self._procs: dict[int, Any] = {}  # the pool's worker processes, for exit codes when one dies
        self._tickets: Path | None = None  # a folder of ticket files: which worker runs which task
        self._launched = 0
        self._deaths: list[WorkerDeath] = []

    def _ensure_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(
                self.jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(self.threads,),
            )
        return self._pool

    def submit(self, task: Task) -> list[Finished]:
        if task.on_driver:
            return [run_here(task)]
        try:
            blob = _dumps((task.fn, task.args))
        except Exception as exc:  # noqa: BLE001 - a lambda or local class in a plugin, ...
            now = time.time()
            return [
                Finished(
                    task,
                    None,
                    f"cannot be sent to a worker process ({type(exc).__name__}: {exc}); "
                    "define the plugin's functions at module level, or run with --jobs 1",
                    1,
                    now,
                    now,
                    {"executor": POOL},
                )
            ]
        self._queue.append(_Entry(task, blob))
        done = self._collect(block=False)
        self._launch()
        while self._queue:  # every worker busy: wait for one
            done += self._collect(block=True)
            self._launch()
        return done

    def drain(self) -> list[Finished]:
        done: list[Finished] = []
        while self._queue or self._running:
            self._launch()
            done += self._collect(block=True)
        return done

    def _launch(self) -> None:
        while self._queue:
            entry, busy = self._queue[0], list(self._running.values())
            if busy and (entry.alone or len(busy) >= self.jobs or any(e.alone for e in busy)):
                return
            self._queue.popleft()
            pool = self._ensure_pool()
            if self._tickets is None:
                self._tickets = Path(tempfile.mkdtemp(prefix="attnbench-pool-"))
            self._launched += 1
            ticket = str(self._tickets / str(self._launched))
            with _thread_env(self.threads):  # a worker is spawned here when none is idle
                future = pool.submit(_call, entry.blob, ticket)
            now = time.time()
            self._running[future] = replace(entry, started=entry.started or now, attempt_started=now, ticket=ticket)
            self._procs.update(getattr(pool, "_processes", None) or {})  # no public API before 3.14
            # CPython wakes the pool's manager thread before it spawns the worker for a task, so the
            # manager may wait without watching that worker and miss its death until some other task
            # finishes: wake it again now that the worker exists (no public API for this).
            wakeup = getattr(pool, "_executor_manager_thread_wakeup", None)
            if wakeup is not None:
                with contextlib.suppress(Exception):  # the pool broke meanwhile: _collect finds out
                    wakeup.wakeup()

    def _collect(self, block: bool) -> list[Finished]:
        if not self._running:
            return []
        ready, _ = cf.wait(list(self._running), timeout=None if block else 0, return_when=cf.FIRST_COMPLETED)
        done, lost = self._settle(ready)
        if lost:
            more, lost_too = self._settle(cf.wait(list(self._running)).done)  # the whole pool went down
            done += more + self._recover(lost + lost_too)
        return done

    def _settle(self, futures: Any) -> tuple[list[Finished], list[_Entry]]:
        done, lost = [], []
        for future in futures:
            entry = self._running.pop(future)
            exc = future.exception()
            if exc is None:
                value, info = future.result()
                done.append(Finished(entry.task, value, None, entry.attempt, entry.started, time.time(), info))
            elif isinstance(exc, BrokenProcessPool):
                lost.append(entry)
            else:  # the worker could not unpickle the task or send its value back
                done.append(
                    Finished(
                        entry.task,
                        None,
                        f"the worker process could not run it: {type(exc).__name__}: {exc}",
                        entry.attempt,
                        entry.started,
                        time.time(),
                        {"executor": POOL},
                    )
                )
        return done, lost

    def deaths(self) -> list[WorkerDeath]:
        deaths, self._deaths = self._deaths, []
        return deaths

    @staticmethod
    def _ran_in(entry: _Entry) -> int | None:
        """The process id of the worker that took ``entry``; None if none took it (yet)."""
        try:
            return int(Path(entry.ticket).read_text())
        except (OSError, ValueError):
            return None

    def _recover(self, lost: list[_Entry]) -> list[Finished]:
        """A worker died and the pool with it. The task that worker ran has used an attempt:
        it runs again while its retries last, else it fails. The tasks in flight beside it run
        again at no cost. When it is not known which worker ran what, every task that started
        is a suspect: each uses an attempt, and those left run again one at a time."""
        procs = self._procs
        self._shutdown(terminate=False)  # the broken pool stopped its workers; this joins them
        # The pool ends the other workers with SIGTERM once one died.
        died = {pid: p.exitcode for pid, p in procs.items() if p.exitcode not in (None, 0, -signal.SIGTERM)}
        ran_in = [self._ran_in(e) for e in lost]
        killed = [e for e, pid in zip(lost, ran_in, strict=True) if pid in died]
        known = bool(killed)
        if not known:
            killed = [e for e, pid in zip(lost, ran_in, strict=True) if pid is not None] or lost
        interrupted = [e for e in lost if all(e is not k for k in killed)]
        codes = sorted({died[pid] for pid in ran_in if pid in died} or set(died.values()))
        how = ", ".join(map(_how, codes)) or "exit status unknown"
        now, worker = time.time(), {"executor": POOL, "died": True, "exit_codes": codes}
        doubt = "" if known else f"; {len(killed)} cells were in flight and which one's worker died is not known"
        attempts, failed, again = [], [], []
        for entry in killed:
            error = (
                f"the worker process running this cell died ({how}) on attempt {entry.attempt} of "
                f"{entry.task.retries + 1}: killed, or crashed outside Python (out of memory, a segfault, "
                f"os._exit){doubt}"
            )
            done = Finished(entry.task, None, error, entry.attempt, entry.attempt_started, now, worker)
            attempts.append(done)
            if entry.attempt <= entry.task.retries:
                again.append(replace(entry, attempt=entry.attempt + 1, alone=len(killed) > 1))
            else:
                failed.append(done)
        self._queue.extendleft(reversed([replace(e, alone=False) for e in interrupted]))
        self._queue.extendleft(reversed(again))
        self._deaths.append(WorkerDeath(how, attempts, [e.task.key for e in again], [e.task for e in interrupted]))
        return failed

    def _shutdown(self, terminate: bool) -> None:
        if self._pool is None:
            return
        pool, self._pool, self._procs = self._pool, None, {}
        if not terminate:
            pool.shutdown(wait=True)
            return
        # No public way to stop running workers before Python 3.14 (terminate_workers): the pool's own.
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        manager = getattr(pool, "_executor_manager_thread", None)
        if manager is not None:
            manager.join(timeout=10)
            if manager.is_alive():  # seen once: stuck reading a message a killed worker left half-written
                with contextlib.suppress(Exception):
                    # our copy of the write end: the read ends (a private attribute of CPython's SimpleQueue)
                    pool._result_queue._writer.close()  # pyright: ignore[reportAttributeAccessIssue]
                manager.join(timeout=10)

    def close(self) -> None:
        """Stop the workers; interrupted (tasks still in flight), kill them rather than wait."""
        interrupted = bool(self._running or self._queue)
        self._queue.clear()
        self._running.clear()
        self._shutdown(terminate=interrupted)
        if self._tickets is not None:
            shutil.rmtree(self._tickets, ignore_errors=True)
            self._tickets = None
