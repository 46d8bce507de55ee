"""Where the GPU check writes, all under one output folder."""

from __future__ import annotations

from pathlib import Path


class Layout:
    """OUT/store.sqlite, suite.yaml, logs/<step>.log, steps/<step>.json, report/, summary.json, summary.md."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "store.sqlite"
        self.suite = root / "suite.yaml"
        self.logs = root / "logs"
        self.steps = root / "steps"
        self.report = root / "report"
        self.summary_json = root / "summary.json"
        self.summary_md = root / "summary.md"

    def make(self) -> None:
        for folder in (self.root, self.logs, self.steps):
            folder.mkdir(parents=True, exist_ok=True)

    def log(self, step: str) -> Path:
        return self.logs / f"{step}.log"

    def step_json(self, step: str) -> Path:
        return self.steps / f"{step}.json"
