"""Internal pytest module run by ``attnbench.experiments.speed.timing.time_sweep`` (never collected by
the project's own test run): one pytest-benchmark test per sequence length of a sweep."""

from __future__ import annotations

import pytest

from attnbench.experiments.speed.stash import PLAN_KEY


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "T" in metafunc.fixturenames:
        lengths = metafunc.config.stash[PLAN_KEY].lengths()
        metafunc.parametrize("T", lengths, ids=[f"T{t}" for t in lengths])


def test_point(benchmark, T: int, request: pytest.FixtureRequest) -> None:
    request.config.stash[PLAN_KEY].run_point(benchmark, T)
