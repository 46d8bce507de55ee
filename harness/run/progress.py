"""Progress of a suite: one live line per cell on a terminal (step/total, tokens/s, last
train and val loss, ETA of the cell and of the suite), plain periodic lines otherwise."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from attnbench.plan.cells import Cell

PLAIN_INTERVAL_S = 15.0  # between plain lines when output is not a terminal
LIVE_INTERVAL_S = 0.5

# Third-party progress bars (datasets, the hub, lm-eval's tqdm) would interleave with ours.
QUIET_ENV = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}


def silence_third_party_bars() -> None:
    """Set the libraries' own switches. They read them when first imported, so only a library
    already imported is told directly (importing datasets here would cost a second per run)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    datasets = sys.modules.get("datasets")
    if datasets is not None:
        datasets.disable_progress_bars()


def duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _tokens_per_step(cell: Cell) -> int | None:
    spec = cell.spec
    batch, seq = getattr(spec, "batch_size", None), getattr(spec, "seq_len", None)
    return batch * seq if batch and seq and cell.kind in ("train", "scaling") else None


def _short(value: Any) -> str:
    """2e-3 rather than 0.002: grid values read as they are written in suites."""
    if isinstance(value, (list, tuple)):
        return ",".join(_short(v) for v in value)
    if isinstance(value, float) and value != 0 and not 1e-2 <= abs(value) < 1e4:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _set_options(options: Any) -> dict[str, Any]:
    """The variant options a suite set away from their defaults."""
    if not dataclasses.is_dataclass(options):
        return {}
    out = {}
    for f in dataclasses.fields(options):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            continue  # no default to differ from (a hybrid's layers: its name says them)
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if getattr(options, f.name) != default:
            out[f.name] = getattr(options, f.name)
    return out


def cell_label(i: int, n: int, cell: Cell) -> str:
    """``[37/54] recall linear d64x2 seed 0 lr=2e-3``: the grid point and set options name the cell."""
    point = {k: v for k, v in cell.coords.items() if k not in ("variant", "model", "d_model", "n_layer", "seed")}
    extra = " ".join(f"{k}={_short(v)}" for k, v in {**point, **_set_options(cell.model.options)}.items())
    label = f"[{i}/{n}] {cell.experiment} {cell.variant} d{cell.model.d_model}x{cell.model.n_layer} seed {cell.seed}"
    return f"{label} {extra}" if extra else label


class ProgressLine:
    """One updating status line per cell on a terminal; plain lines when output is a file.
    Plain lines start with the cell's [i/n], so several cells in flight stay readable; in a
    pool worker (one of several processes sharing the terminal) lines are always plain."""

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.out, self.clock = out, clock
        self.worker = multiprocessing.parent_process() is not None
        self.tty = bool(getattr(out, "isatty", lambda: False)()) and not self.worker
        self._last = 0.0
        self._cell_times: list[float] = []  # seconds of the cells finished in this run

    def _emit(self, text: str) -> None:
        """One write per line: other processes write lines to the same terminal or file."""
        self.out.write(text)
        self.out.flush()

    def _suite_eta(self, i: int, n: int, cell_eta: float | None) -> float | None:
        """This cell's ETA plus the cells after it at the mean duration of those finished."""
        if cell_eta is None:
            return None
        if i == n:
            return cell_eta
        if not self._cell_times:
            return None
        return cell_eta + (n - i) * sum(self._cell_times) / len(self._cell_times)

    def cell(self, i: int, n: int, cell: Cell) -> Callable[..., None]:
        self._emit(cell_label(i, n, cell) + "\n")
        started, per_step = self.clock(), _tokens_per_step(cell)
        state: dict[str, Any] = {"val": None, "done": False}

        def update(
            step: int, total: int, loss: float | None, *, val: float | None = None, label: str | None = None
        ) -> None:
            now = self.clock()
            state["val"] = val if val is not None else state["val"]
            finished = total > 0 and step >= total
            if finished and not state["done"]:
                state["done"] = True
                self._cell_times.append(now - started)
            if not finished and now - self._last < (LIVE_INTERVAL_S if self.tty else PLAIN_INTERVAL_S):
                return
            self._last = now
            elapsed = now - started
            eta = elapsed * (total - step) / step if step and total else None
            lead = "  " if self.tty else f"[{i}/{n}] "  # plain lines say which cell they are about
            parts = [f"{lead}step {step}/{total}" if total else f"{lead}step {step}"]
            if label:
                parts.append(label)
            if per_step and elapsed > 0:
                parts.append(f"{step * per_step / elapsed:,.0f} tok/s")
            if loss is not None:
                parts.append(f"loss {loss:.4f}")
            if state["val"] is not None:
                parts.append(f"val {state['val']:.4f}")
            # A worker sees only its own cells: the suite's ETA is the driver's to know.
            parts.append(
                f"ETA cell {duration(eta)}"
                if self.worker
                else f"ETA cell {duration(eta)}, suite {duration(self._suite_eta(i, n, eta))}"
            )
            msg = " | ".join(parts)
            self._emit(("\r\033[K" + msg if self.tty else msg) + ("" if self.tty and not finished else "\n"))

        return update
