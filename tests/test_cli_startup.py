"""The command line starts fast: parsing any command's --help, and listing suites, import
none of the heavy libraries (they load inside the commands that use them). Timings are
benchmarks/bench_startup.py's job; this guards the import graph, which is what makes them."""

from __future__ import annotations

import argparse
import json

import attnbench
from attnbench.cli import COMMANDS
from tests.helpers import python

HEAVY = ("torch", "transformers", "lm_eval", "datasets", "pandas", "matplotlib", "seaborn", "scipy")


def test_help_of_every_command_imports_no_heavy_library():
    """One subprocess parses `--help` and each command's `--help` (lm-eval's is lm-eval's
    own, so it is left out), then `suites`, and reports what got imported."""
    proc = python(
        """
        import argparse, contextlib, io, json, sys
        from attnbench.cli import COMMANDS, main

        sub = argparse.ArgumentParser().add_subparsers()
        for module in COMMANDS:
            module.add_parser(sub)
        commands = [name for name in sub.choices if name != "lm-eval"]
        for argv in (["--help"], *([c, "--help"] for c in commands), ["suites"]):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                main(argv)
        print(json.dumps({"commands": commands, "modules": sorted(m.split(".")[0] for m in sys.modules)}))
        """
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "run" in seen["commands"] and "validate" in seen["commands"]
    loaded = sorted(set(HEAVY) & set(seen["modules"]))
    assert not loaded, f"parsing --help imported {loaded}: import them inside the command's run()"


def test_lazy_public_api_resolves_every_name():
    """`attnbench.__all__` loads on first use (PEP 562); every name is there, from its home."""
    missing = [n for n in attnbench.__all__ if getattr(attnbench, n, None) is None]
    assert not missing
    assert set(attnbench.__all__) == set(attnbench._HOMES) | {"__version__"}
    assert attnbench.split_heads.__module__ == "attnbench.nn.backbone"


# the public names that need torch (docs/plugins.md, "Registering without torch"): a plugin's
# registration may use every other name without importing it
NEED_TORCH = {
    "Backbone", "LanguageModel", "ModelOutput", "lm_loss", "embed_with_positions", "mark_residual", "split_heads",
    "merge_heads", "linear_attention", "log_attention", "LinearState", "LogState", "linear_init_state",
    "log_init_state",
}  # fmt: skip


def test_public_names_other_than_the_model_and_kernels_import_no_torch():
    light = sorted(set(attnbench.__all__) - NEED_TORCH)
    proc = python(
        f"""
        import json, sys
        import attnbench
        for name in {light!r}:
            getattr(attnbench, name)
        print(json.dumps(sorted(m.split(".")[0] for m in sys.modules)))
        """
    )
    assert proc.returncode == 0, proc.stderr
    loaded = sorted({"torch", "numpy"} & set(json.loads(proc.stdout.strip().splitlines()[-1])))
    assert not loaded, f"a public name a registration may use imported {loaded}"
    assert set(attnbench.__all__) >= NEED_TORCH  # the list names real public names


def test_help_texts_name_the_defaults_filled_in_at_run_time():
    """check's --long-T / --time-limit defaults and checkpoints' 'chosen' marks are written
    in the help (so --help needs no gate or report import): they match the code's."""
    from attnbench.gate.checks import DEFAULT_LONG_T, DEFAULT_TIME_LIMIT_S
    from attnbench.report.checkpoints import CHOSEN_POINT, CHOSEN_RUN

    subparsers = argparse.ArgumentParser().add_subparsers()
    for module in COMMANDS:
        module.add_parser(subparsers)
    sub = subparsers.choices
    check = " ".join(sub["check"].format_help().split())
    assert f"the gate's, {DEFAULT_LONG_T})" in check
    assert f"the gate's, {DEFAULT_TIME_LIMIT_S:g})" in check
    described = " ".join((sub["checkpoints"].description or "").split())
    assert f"'{CHOSEN_RUN}' is the chosen run" in described
    assert f"'{CHOSEN_POINT}' another seed" in described


def test_validate_imports_no_heavy_library_not_even_torch():
    """`validate quick --no-build` loads every built-in plugin and registers its variants and tasks, and
    sizes the suite's cells, without torch: registration modules build their models on first
    use. (The toy plugin installed for the tests imports torch at the top, as a plugin may: it
    is left out.)"""
    proc = python(
        """
        import contextlib, importlib.metadata as md, io, json, os, sys
        builtin = [ep.name for ep in md.entry_points(group="attnbench") if ep.value.startswith("attnbench.")]
        os.environ["ATTNBENCH_PLUGINS"] = ",".join(builtin)
        from attnbench.cli import main

        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["validate", "quick", "--no-build"])
        print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
        """
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["code"] == 0
    # the plugins did load (else this test guards nothing)
    assert {
        "attnbench.plugins.attention.softmax",
        "attnbench.plugins.tasks.synthetic",
        "attnbench.plugins.recurrent.gla",
    } <= set(seen["modules"])
    loaded = sorted((set(HEAVY) | {"numpy", "pytest", "_pytest"}) & {m.split(".")[0] for m in seen["modules"]})
    assert not loaded, f"validate imported {loaded}: import them inside the code that builds or runs a model"


def test_the_runner_loads_no_library_a_cell_may_not_need():
    """`attnbench run` imports the runner and every experiment kind before any cell runs: none of
    them may pull in scipy (the sequential-seeds rule loads it when a boundary is computed),
    datasets or pandas (a data source loads them) or pytest (a speed sweep)."""
    proc = python(
        """
        import json, sys
        import attnbench.cli.cmd_run, attnbench.run.runner
        from attnbench.experiments.registry import KIND_TABLE, get_kind
        for kind in KIND_TABLE:
            get_kind(kind)
        print(json.dumps(sorted(m.split(".")[0] for m in sys.modules)))
        """
    )
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "torch" in modules  # the kinds did load
    loaded = sorted({"scipy", "datasets", "pandas", "pytest", "_pytest", "lm_eval", "transformers"} & modules)
    assert not loaded, f"loading the runner imported {loaded}: import them where they are used"
