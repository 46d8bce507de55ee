"""A plugin names its torch builders by "package.module:object" strings: checked for format when
it registers, imported on first use, each failure a typed error naming the plugin."""

from __future__ import annotations

import pickle
import sys
import textwrap
import types
import uuid
from pathlib import Path

import pytest
import torch

from attnbench import Backbone, ModelConfig, Task, Variant, hookimpl
from attnbench.errors import PluginError, PluginReferenceError
from attnbench.registry.loader import get_plugin_manager, load_registry

MODEL = """
import torch
from torch import nn

calls = []


class Doubler(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        calls.append(layer_idx)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x):  # (B, T, D) -> (B, T, D), position-wise: causal
        return 2 * self.proj(x)


def maps(mixer, x):  # (B, H, T, T): each position attends to itself
    B, T, _ = x.shape
    return torch.eye(T).expand(B, 1, T, T)


def generate(options, n, seed):
    from attnbench import TaskBatch

    inputs = torch.zeros(n, 4, dtype=torch.long)
    return TaskBatch(inputs, inputs)


NOT_CALLABLE = 3
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh importable package (a new name per test) with ``model.py`` above."""
    name = f"lazyplug_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "model.py").write_text(textwrap.dedent(MODEL))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _registry(**fields):
    plugin = types.ModuleType("lazy")

    @hookimpl
    def attnbench_register_variants(register):
        register(Variant(name="lazy-mixer", **fields))

    vars(plugin).update(attnbench_register_variants=attnbench_register_variants)
    return load_registry(get_plugin_manager([("lazy", plugin)], entry_points=False))


def test_a_string_registers_without_import_and_builds_on_first_use(package):
    registry = _registry(build_mixer=f"{package}.model:Doubler", attention_maps=f"{package}.model:maps")
    assert f"{package}.model" not in sys.modules  # registering imported nothing
    variant = registry.get("lazy-mixer")
    assert any(f.endswith(f"{package}/model.py") for f in variant.source_files)  # the identity covers the model

    config = ModelConfig(d_model=8, n_layer=2, n_head=2, context=16)
    model = Backbone(config, variant.build_mixer)
    assert sys.modules[f"{package}.model"].calls == [0, 1]
    x = torch.randn(2, 5, 8)
    mixer = model.blocks[0].mixer
    assert variant.attention_maps is not None
    assert variant.attention_maps(mixer, x).shape == (2, 1, 5, 5)
    assert model(torch.randint(0, 256, (1, 6))).logits.shape == (1, 6, 256)  # runs end to end


def test_a_string_pickles_by_name(package):
    variant = _registry(build_mixer=f"{package}.model:Doubler").get("lazy-mixer")
    again = pickle.loads(pickle.dumps(variant.build_mixer))
    assert again == variant.build_mixer
    assert isinstance(again(ModelConfig(d_model=8, n_head=2), 0), torch.nn.Module)


@pytest.mark.parametrize("text", ["Doubler", "pkg.model", "pkg.model:", "pkg model:Doubler", "pkg.model:Dou-bler"])
def test_a_malformed_string_is_refused_at_registration(text):
    with pytest.raises(PluginError, match=r"variant 'lazy-mixer' \(plugin 'lazy'\): build_mixer=") as info:
        _registry(build_mixer=text)
    assert "'package.module:object'" in str(info.value)
    assert not isinstance(info.value, PluginReferenceError)


def test_a_malformed_attention_maps_string_is_refused_too(package):
    with pytest.raises(PluginError, match=r"plugin 'lazy'\): attention_maps='maps'"):
        _registry(build_mixer=f"{package}.model:Doubler", attention_maps="maps")


def test_a_missing_module_is_a_typed_error_on_first_use(package):
    variant = _registry(build_mixer=f"{package}.nomodel:Doubler").get("lazy-mixer")
    with pytest.raises(
        PluginReferenceError, match=rf"plugin 'lazy'\): build_mixer: .*no module named '{package}.nomodel'"
    ):
        variant.build_mixer(ModelConfig(d_model=8, n_head=2), 0)


def test_a_missing_object_is_a_typed_error_naming_the_plugin(package):
    variant = _registry(build_mixer=f"{package}.model:Dubler").get("lazy-mixer")
    with pytest.raises(
        PluginReferenceError, match=r"plugin 'lazy'\).*has no attribute 'Dubler' \(did you mean 'Doubler'\?\)"
    ):
        Backbone(ModelConfig(d_model=8, n_head=2), variant.build_mixer)


def test_an_object_that_is_not_callable_is_a_typed_error(package):
    variant = _registry(build_mixer=f"{package}.model:NOT_CALLABLE").get("lazy-mixer")
    with pytest.raises(PluginReferenceError, match=r"plugin 'lazy'\).*names a int, not something callable"):
        variant.build_mixer(ModelConfig(d_model=8, n_head=2), 0)


def test_a_module_that_fails_inside_keeps_its_own_error(package, tmp_path):
    (tmp_path / package / "broken.py").write_text("import lazyplug_nothing_here\n")
    variant = _registry(build_mixer=f"{package}.broken:Doubler").get("lazy-mixer")
    with pytest.raises(ModuleNotFoundError, match="lazyplug_nothing_here") as info:
        variant.build_mixer(ModelConfig(d_model=8, n_head=2), 0)
    assert not isinstance(info.value, PluginReferenceError)


def test_a_task_names_its_generator_by_a_string(package):
    plugin = types.ModuleType("lazytask")

    @hookimpl
    def attnbench_register_tasks(register):
        register(Task("lazy-task", dict, f"{package}.model:generate", lambda o: 4, lambda o: 4))

    vars(plugin).update(attnbench_register_tasks=attnbench_register_tasks)
    task = load_registry(get_plugin_manager([("lazytask", plugin)], entry_points=False)).get_task("lazy-task")
    assert f"{package}.model" not in sys.modules
    assert task.generate(None, 3, 0).inputs.shape == (3, 4)


def test_a_malformed_task_string_names_the_plugin():
    plugin = types.ModuleType("lazytask")

    @hookimpl
    def attnbench_register_tasks(register):
        register(Task("lazy-task", dict, "no colon here", lambda o: 4, lambda o: 4))

    vars(plugin).update(attnbench_register_tasks=attnbench_register_tasks)
    with pytest.raises(PluginError, match=r"task 'lazy-task' \(plugin 'lazytask'\): generate='no colon here'"):
        load_registry(get_plugin_manager([("lazytask", plugin)], entry_points=False))


def test_builtin_registrations_name_their_models_by_strings_that_resolve():
    from attnbench.contract.reference import LazyObject
    from attnbench.registry.loader import LAZY_FIELDS

    registry = load_registry()
    builtins = {n: v for n, v in registry.variants.items() if v.distribution == "attnbench"}
    assert len(builtins) >= 13  # the six attention variants and seven recurrent ones
    for name, variant in builtins.items():
        assert isinstance(variant.build_mixer, LazyObject), name
        assert variant.build_mixer.target.startswith("attnbench.plugins."), name
    tasks = {n: t for n, t in registry.tasks.items() if t.distribution == "attnbench"}
    assert all(isinstance(t.generate, LazyObject) for t in tasks.values())
    for kind, items in (("variant", builtins), ("task", tasks)):
        for name, item in items.items():
            for field in LAZY_FIELDS[kind]:
                ref = getattr(item, field)
                if isinstance(ref, LazyObject):
                    assert callable(ref.resolve()), f"{name}.{field}"  # no typo in a built-in string
