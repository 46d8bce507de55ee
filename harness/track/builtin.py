"""Built-in trackers, registered through the same hook as a plugin's: TensorBoard event
files, Weights & Biases in offline mode, MLflow's local file store. Each library is an
optional extra, imported only when its tracker is chosen."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

from attnbench.contract.hookspecs import hookimpl
from attnbench.errors import TrackerError
from attnbench.track.base import TrackerSpec


def missing_message(module: str, extra: str, why: object) -> str:
    return f"tracker needs {module!r} ({why}); install it with pip install 'attnbench[{extra}]' -c constraints.txt"


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TrackerError(missing_message(module, extra, exc)) from None


def run_name(cell: dict[str, Any]) -> str:
    """One tracker run per cell: experiment/variant/model/seed (and grid point)."""
    coords = {k: v for k, v in cell["coords"].items() if k not in ("variant", "seed", "d_model", "n_layer")}
    point = ",".join(f"{k}={v}" for k, v in sorted(coords.items()) if k != "model")
    return "/".join(
        filter(None, (cell["experiment"], cell["variant"], f"m{coords.get('model', 0)}", f"seed{cell['seed']}", point))
    )


def result_tag(r: Any) -> str:
    """A result's scalar name with its tags: ``eval/loss/num_kv_pairs=4``, ``speed/forward/T=256/time_s``."""
    tags = dict(r.tags)
    if "mode" in tags and "T" in tags:
        return f"speed/{tags.pop('mode')}/T={tags.pop('T')}/{r.name}"
    rest = ",".join(f"{k}={v}" for k, v in sorted(tags.items()) if isinstance(v, (int, float, str)))
    return "/".join(filter(None, ("eval", r.name, rest)))


class TensorBoardTracker:
    """One event-file run per cell: curve points live (flushed as logged), then eval rows
    and speed points at the last step once the cell is stored."""

    def __init__(self, out_dir: Path, suite: str) -> None:
        self.module = _require("torch.utils.tensorboard", "tensorboard")
        _require("tensorboard", "tensorboard")
        self.root = out_dir / suite
        self._open: dict[str, Any] = {}  # cell key -> its SummaryWriter, while the cell runs
        self._last: dict[str, int] = {}  # cell key -> last step written (eval rows go there)

    def _writer(self, cell: dict[str, Any]) -> Any:
        if cell["key"] not in self._open:
            self._open[cell["key"]] = self.module.SummaryWriter(log_dir=str(self.root / run_name(cell)))
        return self._open[cell["key"]]

    def log_points(self, cell, metrics) -> None:
        writer = self._writer(cell)
        for m in metrics:
            writer.add_scalar(m.name, m.value, global_step=m.step)
        self._last[cell["key"]] = max([self._last.get(cell["key"], 0), *(m.step for m in metrics)])
        writer.flush()  # a TensorBoard watching the folder sees the curve as it grows

    def log_cell(self, cell, metrics, results) -> None:
        writer = self._writer(cell)
        for m in metrics:
            writer.add_scalar(m.name, m.value, global_step=m.step)
        last = max([self._last.pop(cell["key"], 0), *(m.step for m in metrics)])
        for r in results:
            if isinstance(r.value, (int, float)):
                writer.add_scalar(result_tag(r), r.value, global_step=last)
        self._open.pop(cell["key"]).close()

    def close(self) -> None:
        for writer in self._open.values():
            writer.close()
        self._open.clear()


class WandbTracker:
    """Offline runs only: no login, no sync, no error reporting (wandb's telemetry)."""

    def __init__(self, out_dir: Path, suite: str) -> None:
        # Read when wandb starts its service process (wandb-core): no observability upload.
        os.environ["WANDB_ERROR_REPORTING"] = "false"
        self.wandb, self.dir, self.suite = _require("wandb", "wandb"), out_dir, suite
        out_dir.mkdir(parents=True, exist_ok=True)
        # Offline in the global settings too (wandb's telemetry reads those, not init()'s); no
        # system metrics: they would describe this replay, not the cell's training.
        try:
            self.settings = self.wandb.Settings(mode="offline", x_disable_stats=True)
            self.wandb.setup(settings=self.settings)
        except Exception as exc:
            raise TrackerError(f"wandb could not start offline under {out_dir}: {exc}") from exc
        self._open: dict[str, Any] = {}  # cell key -> its wandb run, while the cell trains

    def _run(self, cell: dict[str, Any]) -> Any:
        if cell["key"] not in self._open:
            self._open[cell["key"]] = self.wandb.init(
                project=self.suite,
                name=run_name(cell),
                dir=str(self.dir),
                config={"cell_key": cell["key"], **cell["coords"]},
                settings=self.settings,
                reinit="create_new",
            )  # one run per cell, open while it trains; other runs left be
        return self._open[cell["key"]]

    def log_points(self, cell, metrics) -> None:
        try:
            run = self._run(cell)
            for m in metrics:
                run.log({m.name: m.value}, step=m.step)
        except Exception as exc:
            raise TrackerError(f"wandb could not log cell {run_name(cell)!r}: {exc}") from exc

    def log_cell(self, cell, metrics, results) -> None:
        try:
            self.log_points(cell, metrics)
            run = self._open.pop(cell["key"])
            run.summary.update({result_tag(r): r.value for r in results if isinstance(r.value, (int, float))})
            run.finish()
        except TrackerError:
            raise
        except Exception as exc:
            raise TrackerError(f"wandb could not log cell {run_name(cell)!r}: {exc}") from exc

    def close(self) -> None:
        try:
            for run in self._open.values():
                run.finish()
            self._open.clear()
            self.wandb.teardown()  # the service process exits now, not at interpreter exit
        except Exception as exc:
            raise TrackerError(f"wandb could not shut down its service process: {exc}") from exc


def mlflow_name(name: str) -> str:
    """MLflow allows letters, digits, ``_ - . / :`` and spaces in a metric name; the rest become ``_``."""
    return re.sub(r"[^\w\-./: ]", "_", name)


class MlflowTracker:
    """A local file store (``file://``), which MLflow 3 allows only with MLFLOW_ALLOW_FILE_STORE;
    MLflow's usage telemetry is switched off before mlflow is imported (importing sets it up)."""

    def __init__(self, out_dir: Path, suite: str) -> None:
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        self.mlflow = _require("mlflow", "mlflow")
        if hasattr(self.mlflow, "telemetry"):  # imported earlier: drop a telemetry client made then
            self.mlflow.telemetry.set_telemetry_client()
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.mlflow.set_tracking_uri(out_dir.resolve().as_uri())
            self.experiment_id = self.mlflow.set_experiment(suite).experiment_id
            self.client = self.mlflow.tracking.MlflowClient(out_dir.resolve().as_uri())
        except Exception as exc:
            raise TrackerError(f"mlflow could not open the file store {out_dir} (experiment {suite!r}): {exc}") from exc
        self._open: dict[str, str] = {}  # cell key -> its MLflow run id, while the cell trains

    def _run_id(self, cell: dict[str, Any]) -> str:
        if cell["key"] not in self._open:
            run = self.client.create_run(self.experiment_id, run_name=run_name(cell), tags={"cell_key": cell["key"]})
            self._open[cell["key"]] = run.info.run_id
        return self._open[cell["key"]]

    def log_points(self, cell, metrics) -> None:
        try:
            run_id = self._run_id(cell)
            for m in metrics:
                self.client.log_metric(run_id, mlflow_name(m.name), m.value, step=m.step)
        except Exception as exc:
            raise TrackerError(f"mlflow could not log cell {run_name(cell)!r}: {exc}") from exc

    def log_cell(self, cell, metrics, results) -> None:
        self.log_points(cell, metrics)
        try:
            run_id = self._open.pop(cell["key"])
            self.client.set_tag(run_id, "status", cell["status"])
            for r in results:
                if isinstance(r.value, (int, float)):
                    self.client.log_metric(run_id, mlflow_name(result_tag(r)), r.value)
            self.client.set_terminated(run_id, "FINISHED" if cell["status"] == "done" else "FAILED")
        except Exception as exc:
            raise TrackerError(f"mlflow could not log cell {run_name(cell)!r}: {exc}") from exc

    def close(self) -> None:
        for run_id in self._open.values():  # cells that never reached the store
            self.client.set_terminated(run_id, "KILLED")
        self._open.clear()


@hookimpl
def attnbench_register_trackers(register) -> None:
    register(
        TrackerSpec(
            "tensorboard", TensorBoardTracker, "TensorBoard event files (offline)", "tensorboard", ("tensorboard",)
        )
    )
    register(TrackerSpec("wandb", WandbTracker, "Weights & Biases, offline mode (sync later)", "wandb", ("wandb",)))
    register(TrackerSpec("mlflow", MlflowTracker, "MLflow local file store", "mlflow", ("mlflow",)))
