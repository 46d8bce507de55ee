"""`attnbench run SUITE`: run every cell not already in the store.

Under torchrun every process runs this command and trains each cell data-parallel; only
rank 0 opens the store and reports. `--jobs N` runs cells in a local process pool,
`--executor ray` fans them out as Ray tasks."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.cli.common import add_store_option, add_suite_arguments, registry_with_warnings, split_names
from attnbench.errors import DistributedError
from attnbench.run.executors import EXECUTORS, JOBS_ENV

if TYPE_CHECKING:  # the modules themselves load inside the functions (torch: not for --help)
    from attnbench.distributed import DistInfo
    from attnbench.plan.suite import Suite
    from attnbench.registry.loader import Registry
    from attnbench.run.runner import RunReport


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run a suite; cells already stored are skipped")
    add_run_options(p)
    p.set_defaults(func=run)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of ``run`` (``replicate`` runs a suite too, and takes them all)."""
    add_suite_arguments(p)
    add_store_option(p)
    p.add_argument("--variants", help="comma-separated variants to run (default: the suite's)")
    p.add_argument("--experiments", help="comma-separated experiments to run (default: all of the suite's)")
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: the suite's, else auto)")
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where cells run: 'local' (this process, default) or 'ray' (one Ray task per cell)",
    )
    p.add_argument("--address", help="Ray cluster address for --executor ray (default: a local Ray instance)")
    p.add_argument(
        "--jobs",
        type=_workers,
        metavar="N",
        help="cells run at once, each in a single-threaded worker process (default: one per core on "
        f"CPU, one on a GPU, or ${JOBS_ENV}); 1 runs them one after another in this process",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the models of every train, scaling and speed experiment (opt-in; recorded)",
    )

    p.add_argument(
        "--track",
        action="append",
        default=[],
        metavar="NAME",
        help="mirror curves, eval rows and speed points to a tracker (tensorboard, wandb, mlflow, "
        "or a plugin's), under tracking/NAME/ beside the store; repeatable; adds to the suite's",
    )
    p.add_argument(
        "--retry-failed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run again cells whose stored attempt failed (default: the suite's retry_failed, "
        "which defaults to yes); earlier attempts stay in the store",
    )
    p.add_argument(
        "--no-report",
        dest="report",
        action="store_false",
        help="do not write the suite's report (reports/<suite>/ beside the store) at the end",
    )


def _workers(raw: str) -> int:
    try:
        jobs = int(raw)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of workers; give 1 or more")
    return jobs


def _refuse_jobs_with(jobs: int | None, executor: str) -> None:
    """--jobs N fans cells out over local processes; Ray and torchrun place the work themselves."""
    from attnbench import distributed
    from attnbench.run.choose import make_executor

    if jobs is None or jobs == 1:
        return
    if distributed.requested():
        raise DistributedError(
            f"--jobs {jobs} runs cells in a local process pool; under torchrun each cell "
            "trains across the torchrun processes instead: drop --jobs"
        )
    if executor != "local":
        make_executor(executor, jobs=jobs)  # raises: Ray schedules the cells itself


def _open_outputs(stack: contextlib.ExitStack, path: Path, track: list[str], suite: str):
    """The store at ``path`` and the trackers beside it (tracking/), closed by ``stack``. A
    tracker that cannot start (its folder blocked by a file, a plugin's tracker failing) leaves
    nothing: a store file and folders this call made are removed again."""
    from attnbench.store.database import Store
    from attnbench.track.registry import make_trackers

    new = [p for p in (path, *path.parents) if not p.exists()]  # the file, then the folders made for it
    store = Store(path)
    try:
        trackers = make_trackers(track, path.parent / "tracking", suite)
    except BaseException:
        store.close()
        if new and new[0] == path:
            for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                leftover.unlink(missing_ok=True)
            for folder in new[1:]:  # deepest first, each only if empty
                with contextlib.suppress(OSError):
                    folder.rmdir()
        raise
    stack.callback(store.close)
    if store.imported:
        print(
            f"imported {len(store.imported)} finished cells that an earlier run could not write (from {path}.unsaved/)",
            file=sys.stderr,
        )
    for tracker in trackers:
        stack.callback(tracker.close)
    return store, trackers


def run(args: argparse.Namespace) -> int:
    # torch and the experiment code load here, not when the parser is built (attnbench --help)
    from attnbench import distributed
    from attnbench.run.progress import silence_third_party_bars
    from attnbench.run.runner import run_suite
    from attnbench.store.provenance import resolve_device

    silence_third_party_bars()  # datasets', the hub's and lm-eval's bars would interleave with ours
    suite, registry = _suite_and_registry(args)
    with contextlib.ExitStack() as stack:
        info = stack.enter_context(distributed.session(resolve_device(args.device or suite.device)))
        if info is not None and info.rank != 0:  # rank 0 alone opens the store and reports
            run_suite(
                suite,
                None,
                registry,
                device=str(info.device),
                only_variants=split_names(args.variants),
                retry_failed=args.retry_failed,
            )
            return 0
        report = _run_main(args, suite, registry, stack, info)
    return _finish(args, suite, report)


def _suite_and_registry(args: argparse.Namespace) -> tuple[Suite, Registry]:
    """The suite as the options narrow it, and the plugins' registry; refuses an executor that
    torchrun or ``--jobs`` rule out."""
    from attnbench import distributed
    from attnbench.plan.suite import load_suite, with_compile, with_only_experiments

    suite = load_suite(args.suite, args.overrides)
    if args.compile:
        suite = with_compile(suite)
    if args.experiments is not None:
        example = ",".join(e.name for e in suite.experiments[:2])  # this suite's own experiment names
        suite = with_only_experiments(suite, split_names(args.experiments, "--experiments", example) or [])
    registry = registry_with_warnings()
    if distributed.requested() and args.executor != "local":
        raise DistributedError(
            f"torchrun trains each cell across its processes; it cannot be combined with --executor {args.executor}"
        )
    _refuse_jobs_with(args.jobs, args.executor)
    return suite, registry


def _run_main(
    args: argparse.Namespace, suite: Suite, registry: Registry, stack: contextlib.ExitStack, info: DistInfo | None
) -> RunReport:
    """Rank 0's (or the only process's) run: cells planned, then the store, trackers and executor
    opened on ``stack``, then every cell run or skipped."""
    from attnbench.run.choose import make_executor
    from attnbench.run.pool import default_jobs
    from attnbench.run.runner import prepare_run, run_suite
    from attnbench.store.provenance import resolve_device
    from attnbench.track.registry import check_trackers

    # Everything that can refuse the run is checked before the store, its folder or a
    # tracker's folder is created: a refused run leaves no file behind.
    run_device = str(info.device) if info else args.device
    only_variants = split_names(args.variants)
    cells = prepare_run(suite, registry, device=run_device, only_variants=only_variants)
    track = list(dict.fromkeys([*suite.track, *args.track]))
    check_trackers(track)
    device = info.device if info else resolve_device(args.device or suite.device)
    jobs = 1 if info or args.executor != "local" else args.jobs or default_jobs(device.type)
    executor = make_executor(args.executor, address=args.address, jobs=jobs)
    try:
        store, trackers = _open_outputs(stack, Path(args.store), track, suite.name)
    except BaseException:
        executor.close()
        raise
    stack.enter_context(executor)  # closed first: in-flight cells stop before the store closes
    return run_suite(
        suite,
        store,
        registry,
        device=run_device,
        only_variants=only_variants,
        executor=executor,
        trackers=trackers,
        retry_failed=args.retry_failed,
        cells=cells,
    )


def _finish(args: argparse.Namespace, suite: Suite, report: RunReport) -> int:
    """The run's summary line, the suite's report, and the cells that did not finish (exit 1)."""
    print(
        f"{suite.name}: {report.cells} cells, {report.ran} run, {report.skipped} already stored (store: {args.store})"
    )
    if args.report:  # the report shows unfinished cells too, so it is written either way
        from attnbench.report import write_report  # pandas and seaborn load only when reporting

        print(f"report: {write_report(Path(args.store), suite.name)}")
    if report.not_done:
        print("cells that did not finish:\n  " + "\n  ".join(report.not_done), file=sys.stderr)
        return 1
    return 0
