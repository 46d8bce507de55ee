"""A suite is checked once, whole, before it is planned: every problem against the installed
plugins is reported together, each at its file and line (validate and run alike, run before
it creates anything), and expansion then plans the checked suite with no error path of its own."""

from __future__ import annotations

import ast

import pytest

from attnbench.cli import main
from attnbench.errors import SuiteError
from attnbench.experiments import registry as kinds_registry
from attnbench.experiments.registry import expand_suite
from attnbench.plan import suite as suite_module
from attnbench.plan import validation
from attnbench.plan.cells import expand
from attnbench.plan.suite import load_suite
from tests.helpers import REPO, write_suite

# Every registry-level problem a suite can have, one or two per experiment.
BAD = """
version: 1
name: many-problems
defaults:
  data: {source: builtin, max_bytes: 20000, test_fraction: 0.1}
  train: {batch_size: 2, seq_len: 16, budget: {steps: 1}}
  seeds: [0, 1]
experiments:
  - name: baselines
    kind: train
    variants: all
    models: [{d_model: 16, n_layer: 1, n_head: 2}]
    grid: {lr: [1.0e-3, 3.0e-3]}
    protocol: {baselines: [softmax, linaer]}
  - name: hybrid
    kind: train
    variants: [softmx]
    models:
      - {d_model: 16, n_head: 2, layers: {pattern: [glaa, sofmax]}}
  - name: own-model
    kind: train
    variants: [additive, softmax]
    models: [{d_model: 16, n_layer: 1, n_head: 2, positions: none}]
    train: {model_kind: own}
  - name: matched
    kind: train
    variants: [softmax, mamba2, 'gla x3 + softmax']
    variant_options: {softmax: {window: 3}}
    models: [{d_model: 16, n_layer: 2, n_head: 2, context: 8, match_params: gla}]
  - name: task
    kind: train
    variants: [softmax]
    data: {source: task, task: mqar, task_options: {vocab_size: 64, seq_len: 48, num_kv_pairs: 2}}
"""
# (text on the line the problem is reported at, key and message it names)
PROBLEMS = [
    ("baselines: [softmax, linaer]", "experiments[0].protocol.baselines[1]: unknown variant 'linaer'"),
    ("variants: [softmx]", "experiments[1].variants[0]: unknown variant 'softmx'. Did you mean 'softmax'?"),
    ("pattern: [glaa, sofmax]", "experiments[1].models[0].layers.pattern[0]: unknown variant 'glaa'"),
    ("pattern: [glaa, sofmax]", "experiments[1].models[0].layers.pattern[1]: unknown variant 'sofmax'"),
    ("positions: none", "experiments[2].models[0].positions: positions: none applies to the shared backbone"),
    ("model_kind: own", "experiments[2].train.model_kind: variant 'softmax' has no model of its own"),
    ("window: 3", "experiments[3].variant_options.softmax: variant 'softmax' takes no options"),
    ("match_params: gla", "experiments[3].models[0].match_params: 'mamba2' has"),
    ("match_params: gla", "experiments[3].models[0].context: context 8 is shorter than the train experiment"),
    ("match_params: gla", "experiments[3].models[0].n_layer: hybrid 'gla x3 + softmax' repeats a pattern of 4"),
    ("task: mqar", "experiments[4].data: task 'mqar' makes sequences of 48 tokens; set train.seq_len: 48"),
]

SOUND = """
version: 1
name: sound
defaults:
  data: {source: builtin, max_bytes: 20000}
  train: {batch_size: 2, seq_len: 16, budget: {steps: 1}}
experiments:
  - name: text
    kind: train
    variants: [softmax, linear]
    seeds: [0, 1]
    models:
      - {d_model: 16, n_layer: 1, n_head: 2, match_params: softmax, params_within: 0.5}
      - {d_model: 16, n_head: 2, layers: {pattern: [gla, softmax]}}
    grid: {lr: [1.0e-3, 3.0e-3], variant_options.linear.feature_map: [elu, relu]}
  - name: own
    kind: train
    variants: [additive]
    models: [{d_model: 16, n_layer: 1, n_head: 2}]
    train: {model_kind: own}
"""


def _line(text: str, marker: str) -> int:
    [line] = [i for i, row in enumerate(text.splitlines(), 1) if marker in row]
    return line


def _expected(path) -> list[str]:
    text = path.read_text()
    return [f"{path}:{_line(text, marker)}: {problem}" for marker, problem in PROBLEMS]


@pytest.mark.parametrize("command", ["validate", "run"])
def test_every_problem_is_reported_at_once_with_its_file_and_line(tmp_path, capsys, command):
    path = write_suite(tmp_path / "s.yaml", BAD)
    out = tmp_path / "results"
    extra = ["--no-build"] if command == "validate" else ["--store", str(out / "s.sqlite"), "--no-report"]
    assert main([command, str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"invalid suite ({len(PROBLEMS)} problems):" in err
    reported = [line.strip() for line in err.splitlines()[1:]]
    assert len(reported) == len(PROBLEMS), err
    for want, got in zip(_expected(path), reported, strict=True):
        assert got.startswith(want), (want, got)
    assert not out.exists()  # run refused before its store or any folder was made


def test_one_problem_reads_as_before_and_fixing_all_of_them_plans_the_suite(tmp_path, registry):
    one = write_suite(tmp_path / "one.yaml", SOUND.replace("[gla, softmax]", "[gla, softmx]"))
    with pytest.raises(SuiteError) as info:
        validation.check_suite(load_suite(one), registry)
    at = _line(one.read_text(), "softmx")
    want = f"{one}:{at}: experiments[0].models[1].layers.pattern[1]: unknown variant 'softmx'. Did you mean"
    assert str(info.value).startswith(want)  # one problem: the line alone, as before
    good = load_suite(write_suite(tmp_path / "good.yaml", SOUND))
    validation.check_suite(good, registry)
    # softmax 1 model x 2 rates, linear 1 x 2 rates x 2 feature maps, the hybrid 1 x 2 rates; 2 seeds; own: 1
    assert len(expand(validation.check_suite(good, registry))) == (2 + 4 + 2) * 2 + 1


def test_expand_suite_checks_once_and_expands_only_a_sound_suite(tmp_path, registry, monkeypatch):
    calls = {"check": 0, "expand": 0}

    def counted(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(kinds_registry, "check_suite", counted("check", kinds_registry.check_suite))
    monkeypatch.setattr(kinds_registry, "expand", counted("expand", kinds_registry.expand))
    with pytest.raises(SuiteError, match=r"invalid suite \(11 problems\)"):
        expand_suite(load_suite(write_suite(tmp_path / "bad.yaml", BAD)), registry)
    assert calls == {"check": 1, "expand": 0}
    hashed: list[str] = []
    cells = expand_suite(
        load_suite(write_suite(tmp_path / "good.yaml", SOUND)),
        registry,
        corpus_hash=lambda spec: hashed.append(spec.source) or "corpus",
    )
    assert calls == {"check": 2, "expand": 1} and len(cells) == 17 and all(c.key for c in cells)
    assert hashed == ["builtin"]  # the data is loaded once, though checking and keying both read its hash


def test_expand_has_no_error_path(tmp_path, registry, monkeypatch):
    """plan/cells.py names no suite error and catches or raises nothing outside ``Cell``'s own
    guards; planning a checked suite never reaches the error helpers."""
    tree = ast.parse((REPO / "harness" / "plan" / "cells.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not names & {"SuiteError", "suite_error_at", "problem_at", "suite_problems", "check_suite"}
    assert not [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Try)]
    guarded = {id(r) for c in tree.body if isinstance(c, ast.ClassDef) for r in ast.walk(c)}
    assert not [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Raise) and id(n) not in guarded]

    def refuse(*_args, **_kwargs):
        raise AssertionError("expand reached an error helper")

    for name in ("problem_at", "suite_error_at", "suite_problems"):
        monkeypatch.setattr(suite_module, name, refuse)
    good = load_suite(write_suite(tmp_path / "good.yaml", SOUND))
    cells = expand(validation.check_suite(good, registry, corpus_hash=lambda _spec: "c"), kind_code=lambda _kind: "h")
    assert len(cells) == 17 and len({c.key for c in cells}) == 17
    assert {c.variant for c in cells} == {"softmax", "linear", "gla + softmax", "additive"}


# Three experiments, each with one problem; the last one's lies deepest (a swept option's value).
LAST_DEEP = """
version: 1
name: deep
defaults:
  data: {source: builtin, max_bytes: 20000}
  train: {batch_size: 2, seq_len: 16, budget: {steps: 1}}
experiments:
  - name: first
    kind: train
    variants: [softmx]
  - name: second
    kind: train
    variants: [softmax]
    variant_options: {linear: {feature_map: elu}}
  - name: last
    kind: train
    variants: [softmax, linear]
    models: [{d_model: 16, n_layer: 1, n_head: 2}]
    grid: {variant_options.linear.feature_map: [elu, no_such_map]}
"""


@pytest.mark.parametrize("command", ["validate", "run"])
def test_an_invalid_suite_never_reaches_expansion_and_every_problem_is_reported(tmp_path, capsys, monkeypatch, command):
    """The problem deep in the last experiment is found by the check, with the others, before
    a single cell is expanded or created."""
    from attnbench.plan import cells as cells_module

    def never(*_args, **_kwargs):
        raise AssertionError("expansion reached for an invalid suite")

    monkeypatch.setattr(kinds_registry, "expand", never)
    monkeypatch.setattr(cells_module, "Cell", never)
    path = write_suite(tmp_path / "deep.yaml", LAST_DEEP)
    extra = ["--no-build"] if command == "validate" else ["--store", str(tmp_path / "r" / "s.sqlite"), "--no-report"]
    assert main([command, str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "invalid suite (3 problems):" in err, err
    text = path.read_text()
    for marker, problem in (
        ("variants: [softmx]", "experiments[0].variants[0]: unknown variant 'softmx'"),
        ("linear: {feature_map: elu}", "experiments[1].variant_options.linear: options given for 'linear'"),
        ("no_such_map", "experiments[2].grid.variant_options.linear.feature_map: "),
    ):
        assert f"{path}:{_line(text, marker)}: {problem}" in err, (problem, err)
    assert not (tmp_path / "r").exists()


def test_validate_reports_every_schema_error_of_a_suite_at_once(tmp_path, capsys):
    """Errors the schema finds (before any plugin is asked) are reported together too, one per
    line, each at its file and line."""
    body = SOUND.replace("seeds: [0, 1]", "seeds: [0, 1]\n    train: {lr: -1}").replace(
        "train: {model_kind: own}", "train: {model_kind: own, batch_sise: 4}"
    )
    path = write_suite(tmp_path / "schema.yaml", body)
    assert main(["validate", str(path), "--no-build"]) == 2
    err = capsys.readouterr().err
    text = path.read_text()
    assert f"{path}:{_line(text, 'lr: -1')}: experiments[0].train.lr: Input should be greater than 0" in err, err
    assert f"{path}:{_line(text, 'batch_sise')}: experiments[1].train.batch_sise: Extra inputs" in err, err
