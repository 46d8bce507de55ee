"""Plugin loading through entry points, the CLI listing, and plugin errors."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest

from attnbench import Variant, hookimpl
from attnbench.errors import PluginError, UnknownVariantError
from attnbench.plugins.attention import softmax, softmax_model
from attnbench.registry.loader import get_plugin_manager, load_registry
from tests.helpers import fake_distribution as _fake_distribution
from tests.helpers import python, run_cli


def test_list_shows_builtin_and_third_party_with_origin():
    proc = run_cli("list")
    assert proc.returncode == 0, proc.stderr
    variant_table, task_table = proc.stdout.split("\n\n", 1)  # two tables, a blank line apart
    lines = {line.split()[0]: line.split() for line in variant_table.splitlines()[1:]}
    assert lines["softmax"][1:3] == ["softmax", "attnbench"]
    assert lines["toy-ema"][1:3] == ["toy", "attnbench-toy"]  # pip-installed test plugin
    tasks = {line.split()[0]: line.split() for line in task_table.strip().splitlines()[1:]}
    assert {"mqar", "selective_copy", "induction", "text_recall"} <= set(tasks)
    assert tasks["mqar"][1:3] == ["synthetic", "attnbench"]


def test_env_var_limits_loaded_plugins():
    proc = run_cli("list", env={"ATTNBENCH_PLUGINS": "toy"})
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert names == ["toy-ema"]


def test_plugin_raising_on_import_is_reported_and_others_load(tmp_path):
    env = _fake_distribution(tmp_path, "broken-plugin", "broken", "raise RuntimeError('boom at import')\n")
    proc = run_cli("list", env=env)
    assert proc.returncode == 0
    assert "plugin 'broken' failed to load: RuntimeError: boom at import" in proc.stderr
    assert "softmax" in proc.stdout and "toy-ema" in proc.stdout


def test_misspelled_hook_is_rejected_with_suggestion(tmp_path):
    env = _fake_distribution(
        tmp_path,
        "typo-plugin",
        "typo",
        """
        from harness import hookimpl
        @hookimpl
        def attnbench_register_variant(register):
            pass
    """,
    )
    proc = run_cli("list", env=env)
    assert proc.returncode == 2
    assert "unknown hook 'attnbench_register_variant'" in proc.stderr
    assert "did you mean 'attnbench_register_variants'" in proc.stderr


def test_duplicate_variant_name_names_both_plugins():
    clone = types.ModuleType("clone")

    @hookimpl
    def attnbench_register_variants(register):
        register(Variant(name="softmax", build_mixer=softmax_model.SoftmaxAttention))

    vars(clone).update(attnbench_register_variants=attnbench_register_variants)
    loaded = get_plugin_manager([("softmax", softmax), ("clone", clone)], entry_points=False)
    with pytest.raises(PluginError, match=r"'softmax' is registered twice: by plugin 'softmax'.*by plugin 'clone'"):
        load_registry(loaded)


def test_register_raising_is_reported_and_others_register():
    bad = types.ModuleType("bad")

    @hookimpl
    def attnbench_register_variants(register):
        raise ValueError("cannot build")

    vars(bad).update(attnbench_register_variants=attnbench_register_variants)
    registry = load_registry(get_plugin_manager([("softmax", softmax), ("bad", bad)], entry_points=False))
    assert registry.names() == ["softmax"]
    assert [(e.plugin, e.error) for e in registry.errors] == [("bad", "ValueError: cannot build")]


def test_unknown_variant_suggests_closest():
    registry = load_registry(get_plugin_manager([("softmax", softmax)], entry_points=False))
    with pytest.raises(UnknownVariantError, match=r"unknown variant 'sofmax'\. Did you mean 'softmax'\?"):
        registry.get("sofmax")


def test_python_dash_m_harness_entry_point():
    proc = python(
        "import runpy, sys; sys.argv=['attnbench','list']; runpy.run_module('attnbench', run_name='__main__')"
    )
    assert proc.returncode == 0 and "softmax" in proc.stdout


@dataclasses.dataclass(frozen=True)
class _ScaledOptions:
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.scale):  # a str here is Python's "must be real number, not str"
            raise ValueError(f"scale must be finite, got {self.scale}")


def test_an_option_of_the_wrong_type_is_named():
    variant = Variant(name="scaled", build_mixer=softmax_model.SoftmaxAttention, options=_ScaledOptions)
    with pytest.raises(ValueError) as err:
        variant.make_options({"scale": "2"})
    assert str(err.value) == "invalid options for variant 'scaled': scale must be a number, got '2'"
