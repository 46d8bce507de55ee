"""Which executor a command line asks for: here, a local process pool, or Ray."""

from __future__ import annotations

from attnbench.errors import ExecutorError
from attnbench.run.executors import EXECUTORS, Executor, InProcessExecutor, RayExecutor
from attnbench.run.pool import ProcessPoolCellExecutor


def make_executor(name: str = "local", *, address: str | None = None, jobs: int = 1) -> Executor:
    """The executor ``attnbench run --executor NAME [--address ADDR] [--jobs N]`` asks for."""
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}; use one of {list(EXECUTORS)}")
    if address and name != "ray":
        raise ExecutorError("--address names a Ray cluster; use it with --executor ray")
    if name == "ray":
        if jobs > 1:
            raise ExecutorError(
                f"--jobs {jobs} runs cells in a local process pool; Ray schedules the cells "
                "itself (one task per cell, cpus_per_cell each): drop --jobs, or drop --executor ray"
            )
        return RayExecutor(address)
    if jobs > 1:
        return ProcessPoolCellExecutor(jobs)
    return InProcessExecutor()
