"""Suite validation: every bad input gets a message naming file, line, key and fix."""

from __future__ import annotations

import pytest

from attnbench.errors import SuiteError, UnknownVariantError
from attnbench.experiments.registry import expand_suite
from attnbench.plan.base import TrainSpec
from attnbench.plan.specs import TrainExperiment
from attnbench.plan.suite import load_suite
from attnbench.plugins.attention import softmax
from attnbench.registry.loader import get_plugin_manager, load_registry
from tests.helpers import REPO, run_cli, write_suite

GOOD = """
    version: 1
    name: t
    defaults:
      model: {d_model: 32, n_layer: 1, n_head: 2}
      train: {batch_size: 2, seq_len: 32}
    experiments:
      - name: a
        kind: train
        variants: [softmax]
        train: {budget: {steps: 5}}
        grid: {lr: [1.0e-3, 3.0e-3]}
        seeds: [0, 1]
"""


@pytest.fixture
def registry():
    return load_registry(get_plugin_manager([("softmax", softmax)], entry_points=False))


def _error(tmp_path, body: str) -> str:
    path = write_suite(tmp_path / "suite.yaml", body)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    return str(info.value)


def test_good_suite_expands_to_grid_times_seeds(tmp_path, registry):
    suite = load_suite(write_suite(tmp_path / "suite.yaml", GOOD))
    cells = expand_suite(suite, registry)
    assert len(cells) == 4
    assert {(c.spec_as(TrainSpec).lr, c.seed) for c in cells} == {(1e-3, 0), (1e-3, 1), (3e-3, 0), (3e-3, 1)}
    assert all(c.model.d_model == 32 and c.model.context == 32 for c in cells)  # defaults merged


def test_yaml_syntax_error_names_line(tmp_path):
    msg = _error(tmp_path, "version: 1\nexperiments:\n  - name: a\n    kind: [train\n")
    assert "suite.yaml:5" in msg or "suite.yaml:4" in msg
    assert "YAML syntax error" in msg


def test_missing_key_names_it(tmp_path):
    msg = _error(tmp_path, GOOD.replace("        kind: train\n", ""))
    assert "experiments[0].kind: Field required" in msg and "add the key 'kind'" in msg
    assert "suite.yaml:7" in msg  # the experiment's line


def test_wrong_type_names_line_and_value(tmp_path):
    msg = _error(tmp_path, GOOD.replace("steps: 5", "steps: five"))
    assert "suite.yaml:10: experiments[0].train.budget.steps" in msg and "'five'" in msg


@pytest.mark.parametrize("value", ["0", "-5"])
def test_zero_or_negative_budget(tmp_path, value):
    msg = _error(tmp_path, GOOD.replace("steps: 5", f"steps: {value}"))
    assert "experiments[0].train.budget.steps: Input should be greater than 0" in msg


def test_error_in_defaults_points_at_defaults(tmp_path):
    msg = _error(tmp_path, GOOD.replace("batch_size: 2", "batch_size: -2"))
    assert "suite.yaml:5:" in msg and "batch_size" in msg


def test_unknown_key_is_rejected(tmp_path):
    msg = _error(tmp_path, GOOD.replace("seeds: [0, 1]", "seedz: [0, 1]"))
    assert "experiments[0].seedz: Extra inputs are not permitted" in msg


def test_unknown_variant_did_you_mean_with_line(tmp_path, registry):
    suite = load_suite(write_suite(tmp_path / "suite.yaml", GOOD.replace("[softmax]", "[softmx]")))
    with pytest.raises(
        SuiteError,
        match=r"suite.yaml:9: experiments\[0\].variants\[0\]: unknown variant 'softmx'\. Did you mean 'softmax'",
    ):
        expand_suite(suite, registry)


def test_unknown_variant_on_command_line(tmp_path, registry):
    suite = load_suite(write_suite(tmp_path / "suite.yaml", GOOD))
    with pytest.raises(UnknownVariantError, match="Did you mean 'softmax'"):
        expand_suite(suite, registry, only_variants=["sotfmax"])


def test_unknown_variant_option_is_rejected(tmp_path, registry):
    body = GOOD.replace(
        "        seeds: [0, 1]\n", "        seeds: [0, 1]\n        variant_options: {softmax: {window: 3}}\n"
    )
    suite = load_suite(write_suite(tmp_path / "suite.yaml", body))
    with pytest.raises(SuiteError, match="variant 'softmax' takes no options"):
        expand_suite(suite, registry)


def test_include_merges_defaults_and_appends_experiments(tmp_path, registry):
    write_suite(tmp_path / "base.yaml", GOOD)
    write_suite(
        tmp_path / "child.yaml",
        """
        version: 1
        name: child
        include: [base.yaml]
        defaults: {model: {d_model: 16}}
        experiments:
          - {name: b, kind: train, variants: [softmax], train: {budget: {tokens: 640}}}
    """,
    )
    suite = load_suite(tmp_path / "child.yaml")
    assert [e.name for e in suite.experiments] == ["a", "b"]
    assert {c.model.d_model for c in expand_suite(suite, registry)} == {16}


def test_include_cycle_is_reported(tmp_path):
    write_suite(tmp_path / "a.yaml", "version: 1\ninclude: [b.yaml]\nexperiments: []\n")
    write_suite(tmp_path / "b.yaml", "version: 1\ninclude: [a.yaml]\n")
    with pytest.raises(SuiteError, match="include cycle"):
        load_suite(tmp_path / "a.yaml")


def test_validate_command_exit_codes(tmp_path):
    good = write_suite(tmp_path / "good.yaml", GOOD)
    ok = run_cli("validate", str(good))
    assert ok.returncode == 0 and "ok (1 experiments, 4 cells)" in ok.stdout
    bad = write_suite(tmp_path / "bad.yaml", GOOD.replace("steps: 5", "steps: 0"))
    proc = run_cli("validate", str(bad))
    assert proc.returncode == 2 and proc.stderr.startswith("attnbench: error: invalid suite")


@pytest.mark.parametrize(
    "name", ["quick", "smoke", "speed", "scaling", "lm-eval", "mqar-anchor", "mqar-linear-long", "gpu"]
)
def test_shipped_offline_suites_validate(name):
    result = run_cli("validate", f"suites/{name}.yaml")
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_long_linear_sweep_differs_from_the_anchor_sweep_only_in_budget():
    """mqar-linear-long answers 'is linear only under-trained?' for the anchor's kv-sweep:
    it must stay the same experiment at twice the steps."""
    sweep = next(e for e in load_suite(REPO / "suites" / "mqar-anchor.yaml").experiments if e.name == "kv-sweep")
    (long,) = load_suite(REPO / "suites" / "mqar-linear-long.yaml").experiments
    assert isinstance(long, TrainExperiment) and isinstance(sweep, TrainExperiment)
    assert long.variants == ["linear"] and "linear" in sweep.variants
    assert long.model_dump(exclude={"variants", "train"}) == sweep.model_dump(exclude={"variants", "train"})
    assert long.train.model_dump(exclude={"budget"}) == sweep.train.model_dump(exclude={"budget"})
    assert sweep.train.budget.steps is not None and long.train.budget.steps == 2 * sweep.train.budget.steps


def test_seeds_suite_is_the_published_configuration(tmp_path, shared_data):
    """The hub suite, with its data swapped for a local file (as its comments say), expands
    into the three published runs with the published settings."""
    import yaml

    raw = yaml.safe_load((REPO / "suites" / "seeds-wikitext2.yaml").read_text())
    assert raw["defaults"]["data"]["name"] == "wikitext" and raw["defaults"]["data"]["config"] == "wikitext-2-v1"
    raw["defaults"]["data"] = {
        "source": "text",
        "path": str(shared_data / "wikitext-2" / "valid.txt"),
        "val_path": str(shared_data / "wikitext-2" / "test.txt"),
    }
    path = tmp_path / "seeds-local.yaml"
    path.write_text(yaml.safe_dump(raw))
    cells = {c.experiment: c for c in expand_suite(load_suite(path), load_registry())}
    assert set(cells) == {"gpt2", "additive", "windowed"}
    for cell in cells.values():
        m = cell.model
        assert (m.d_model, m.n_layer, m.n_head, m.context, m.dropout) == (128, 6, 4, 2048, 0.1)
        t = cell.spec_as(TrainSpec)
        assert (t.batch_size, t.seq_len, t.lr, t.weight_decay) == (2, 2048, 5e-4, 0.0)
    additive = cells["additive"]
    assert additive.model.options.rescale == 15.0 and additive.spec_as(TrainSpec).model_kind == "own"
    windowed = cells["windowed"].model.options
    assert windowed.windows == (4, 8, 16, 32, 64, 2048) and windowed.rescale == 10.0


# -- defaults: a typed mapping, every key counted ------------------------------------------------
DEFAULTS_KEYS = "accepted: model, data, train, variants, seeds, variant_options, grid, battery"


@pytest.mark.parametrize(
    "defaults, says",
    [
        ("foo: 1", f"defaults: 'foo' is not a defaults key; {DEFAULTS_KEYS}"),
        ("lr: 0.1", "defaults: 'lr' is not a defaults key (did you mean defaults.train.lr?)"),
        ("models: [{d_model: 32}]", "defaults: 'models' is not a defaults key (defaults.model is one size"),
        ("model: {d_model: -5}", "defaults.model.d_model: Input should be greater than 0 (got -5)"),
        ("train: {lr: 0.1, lrr: 1}", "defaults.train.lrr: Extra inputs are not permitted"),
    ],
)
def test_an_unknown_misplaced_or_invalid_defaults_key_is_refused_naming_the_accepted_keys(
    tmp_path, capsys, defaults, says
):
    from attnbench.cli import main

    body = GOOD.replace("      train: {batch_size: 2, seq_len: 32}\n", "")
    body = body.replace("model: {d_model: 32, n_layer: 1, n_head: 2}", defaults)
    code = main(["validate", str(write_suite(tmp_path / "suite.yaml", body))])
    err = capsys.readouterr().err
    assert code == 2 and "suite.yaml:" in err and says in err, err
    if "not a defaults key" in says:
        assert DEFAULTS_KEYS in err


def test_defaults_accept_exactly_the_keys_of_the_json_schema():
    import json

    from attnbench.plan.defaults import Defaults

    schema = json.loads((REPO / "docs" / "suite.schema.json").read_text())
    assert set(schema["properties"]["defaults"]["properties"]) == set(Defaults.model_fields)


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "suites").glob("*.yaml")))
def test_every_shipped_suite_still_validates(name):
    assert load_suite(REPO / "suites" / name).experiments
