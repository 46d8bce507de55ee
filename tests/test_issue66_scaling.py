"""Issue 66, scaling: margins and budget rules are finite positive numbers, never true/false;
"sizes" are distinct parameter counts, checked before any cell runs; a fit that cannot be made
is stored as why ("too few to fit"), never a traceback at the end of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attnbench.errors import ModelSizeError, SuiteError
from attnbench.experiments.registry import expand_suite
from attnbench.experiments.scaling import power_law_rows
from attnbench.plan.size_check import check_model_sizes
from attnbench.plan.suite import load_suite
from tests.helpers import run_cli, write_suite

SUITE = """
version: 1
name: sc
device: cpu
experiments:
  - name: sizes
    kind: scaling
    variants: [softmax]
    data: {source: builtin, max_bytes: 50000}
    models: MODELS
    scaling: {RULE, batch_size: 2, seq_len: 16, eval_interval: 2, eval_tokens: 64, checkpoint: false}
"""
FOUR = "[{d_model: 16, n_layer: 1}, {d_model: 24, n_layer: 1}, {d_model: 32, n_layer: 1}, {d_model: 48, n_layer: 1}]"
HEADS = (
    "[{d_model: 32, n_layer: 1, n_head: 1}, {d_model: 32, n_layer: 1, n_head: 2}, "
    "{d_model: 32, n_layer: 1, n_head: 4}, {d_model: 32, n_layer: 1, n_head: 8}]"
)


def _write(tmp_path: Path, rule: str = "tokens_per_param: 1", models: str = FOUR) -> Path:
    return write_suite(tmp_path / "sc.yaml", SUITE.replace("RULE", rule).replace("MODELS", models))


@pytest.mark.parametrize(
    "rule",
    [
        "tokens_per_param: 1, exponent_margin: .inf",
        "tokens_per_param: 1, exponent_margin: true",
        "tokens_per_param: 1, exponent_margin: .nan",
        "tokens_per_param: .inf",
        "tokens_per_param: true",
        "flops_per_param: .inf",
        "flops_per_param: true",
    ],
)
def test_margins_and_budget_rules_are_finite_positive_numbers(tmp_path: Path, rule: str) -> None:
    with pytest.raises(SuiteError) as err:
        load_suite(_write(tmp_path, rule))
    key = rule.split(",")[-1].split(":")[0].strip()
    assert key in str(err.value)


def test_a_finite_margin_and_rule_are_accepted(tmp_path: Path) -> None:
    suite = load_suite(_write(tmp_path, "tokens_per_param: 1.5, exponent_margin: 0.05"))
    assert suite.experiments[0].spec().exponent_margin == 0.05  # type: ignore[attr-defined]


def test_models_that_differ_only_in_n_head_are_one_size_refused_before_any_cell(tmp_path: Path, registry: Any) -> None:
    suite = load_suite(_write(tmp_path, models=HEADS))  # 4 different model settings: the schema accepts them
    with pytest.raises(ModelSizeError) as err:
        check_model_sizes(expand_suite(suite, registry), registry, build=True)
    msg = str(err.value)
    assert "'sizes', variant 'softmax': 4 models, 1 distinct parameter count(s)" in msg
    assert "vary d_model or n_layer" in msg
    check_model_sizes(expand_suite(load_suite(_write(tmp_path)), registry), registry, build=True)  # 4 real sizes


def test_validate_refuses_one_parameter_count_in_one_line_no_traceback(tmp_path: Path) -> None:
    proc = run_cli("validate", str(_write(tmp_path, models=HEADS)), env={"ATTNBENCH_PLUGINS": "softmax"})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "distinct parameter count" in proc.stderr


def _runs(sizes: list[float], losses: list[float]) -> list[dict[str, Any]]:
    return [
        {
            "status": "done",
            "seed": 0,
            "coords": {"model": i},
            "summary": {"n_params_non_embedding": x, "train_flops": x * 100, "val_loss": y},
        }
        for i, (x, y) in enumerate(zip(sizes, losses, strict=True))
    ]


def test_a_fit_over_one_parameter_count_is_stored_as_too_few_to_fit() -> None:
    rows = power_law_rows(_runs([1000.0] * 4, [3.0, 2.9, 2.8, 2.7]), "softmax", None)
    assert [r.value for r in rows] == [None, None]
    assert [r.tags["error"] for r in rows] == ["1 size: too few to fit (a scaling law needs 4 sizes)"] * 2


def test_a_fit_no_law_can_make_is_stored_as_why() -> None:
    rows = power_law_rows(_runs([1e3, 2e3, 4e3, 8e3], [0.0, 0.0, 0.0, 0.0]), "softmax", None)
    assert all(r.value is None and r.tags["error"].startswith("no fit: ") for r in rows)


def test_the_report_reads_a_stored_infinite_or_true_margin_as_none() -> None:
    from attnbench.report.scaling import _usable_margin

    assert [_usable_margin(v) for v in (float("inf"), True, -1.0, 0.0, None)] == [None] * 5
    assert _usable_margin(0.05) == 0.05
