"""The catalogue, gate part (issue 28, items 5 and 7): a store that fills up while the
gate's verdicts are written, and gate messages that name the broken rule. Each case runs
`attnbench check` in this process; the rule-breaking variants (tests/rule_breakers.py) load
through a real entry point, so every CLI call builds a fresh plugin manager."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from attnbench.cli import main
from attnbench.gate.checks import CHECKS
from attnbench.store import database
from tests.helpers import fake_distribution

SHORT = ["--long-T", "256"]  # the finite check's length: enough for these variants, and fast


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code if isinstance(exc.code, int) else 1


@pytest.fixture
def rules(tmp_path, monkeypatch):
    """Load tests/rule_breakers.py (and softmax) through an installed-distribution entry point."""
    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, "rules-dist", "rules", module="tests.rule_breakers")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("ATTNBENCH_PLUGINS", "softmax,rules")


def _check(tmp_path: Path, capsys, *args: str) -> tuple[int, str, str]:
    code = _main(["check", "--store", str(tmp_path / "st.sqlite"), *SHORT, *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# -- item 5: disk full while the verdicts are stored ---------------------------------------


def test_a_store_that_fills_up_while_verdicts_are_written_says_so_and_keeps_what_it_held(tmp_path, monkeypatch, capsys):
    """Before: a sqlite3 traceback, "database or disk is full" and then "cannot rollback - no
    transaction is active". After: a StoreError naming the store, exit 2, stored rows intact."""
    monkeypatch.setenv("ATTNBENCH_PLUGINS", "softmax")
    path = tmp_path / "st.sqlite"
    assert _check(tmp_path, capsys, "softmax")[0] == 0
    with sqlite3.connect(path) as db:
        before = db.execute("SELECT * FROM checks ORDER BY check_name").fetchall()
    assert len(before) == len(CHECKS)  # one row per check of the gate

    opened = database.Store.__init__

    def full_disk(self, *args, **kwargs):  # the disk fills up once the store is open
        opened(self, *args, **kwargs)
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        self._db.execute(f"PRAGMA max_page_count = {pages}")

    monkeypatch.setattr(database.Store, "__init__", full_disk)
    code, out, err = _check(tmp_path, capsys, "softmax", "--long-T", "200")  # new verdicts: new rows
    assert code == 2, (out, err)
    assert f"could not store the trust gate's verdicts for softmax in results store {path}" in err
    assert "database or disk is full" in err and "nothing stored was changed" in err
    assert "Free disk space" in err and "cannot rollback" not in err
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT * FROM checks ORDER BY check_name").fetchall() == before


# -- item 7: gate messages name the broken rule, not only the symptom -----------------------


def _failure(out: str, variant: str, check: str) -> str:
    """The detail line `attnbench check` prints for one failed or errored check."""
    prefix = f"{variant} / {check}: "
    lines = [line for line in out.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, out
    return lines[0]


def test_a_step_that_mutates_its_state_is_named(tmp_path, rules, capsys):
    """Before: "incremental_equals_parallel: FAIL 3.82e-03 ... worst at backbone, stepping
    twice from the state saved at 160". After: the rule first, with how to keep it."""
    code, out, err = _check(tmp_path, capsys, "mutates_state")
    assert code == 1, (out, err)
    line = _failure(out, "mutates_state", "incremental_equals_parallel")
    assert (
        ": FAIL " in line
        and "step modified the state it was given (backbone: stepping twice from the state saved at 160 gave logits"
        in line
    ), line
    assert "the first step changed that state's values in place" in line and "not `total.add_(s)`" in line
    assert "0/1 variants passed" in out


def test_a_step_that_keeps_its_state_on_the_module_is_named(tmp_path, rules, capsys):
    code, out, err = _check(tmp_path, capsys, "state_on_module")
    assert code == 1, (out, err)
    line = _failure(out, "state_on_module", "incremental_equals_parallel")
    assert (
        "step's result depends on more than the state it was given (backbone: stepping twice from the state "
        "saved at 160 gave logits"
        in line
        and "the state unchanged" in line
    ), line
    assert "none on the module" in line and "step modified" not in line


def test_an_overflow_at_trained_magnitudes_is_not_called_a_leak(tmp_path, rules, capsys):
    """Before: "leak_at_scale: FAIL nan ... worst at weights x16, perturbed after t=40" (and
    float64_at_scale the same), while finite_long_inputs passed. After: non-finite output."""
    code, out, err = _check(tmp_path, capsys, "overflows_at_scale")
    assert code == 1, (out, err)
    assert "overflows_at_scale / finite_long_inputs" not in out  # passed: finite at init weights, inputs x10
    leak = _failure(out, "overflows_at_scale", "leak_at_scale")
    assert "non-finite output at weights x16 (first at position" in leak and "not a leak" in leak, leak
    assert "perturbed after" not in leak and "outputs must stay finite at the magnitudes trained models reach" in leak
    f64 = _failure(out, "overflows_at_scale", "float64_at_scale")
    assert "non-finite fp32 output at weights x16, where float64 stays finite" in f64, f64
    assert "worst at" not in leak + f64


@pytest.mark.parametrize(
    "variant, cast_line, error",
    [
        (
            "float32_inside",
            "s = q.float() @ k",
            "RuntimeError: expected scalar type Double but found Float (at rule_breakers.py:{line})",
        ),
        (
            "returns_float32",
            ".float()  # (B, T, D) the bug",
            "mixer ReturnsFloat32.forward returned torch.float32 for a torch.float64 input",
        ),
    ],
    ids=["float32-operand", "float32-result"],
)
def test_a_mixer_that_cannot_take_float64_is_told_the_rule_and_the_line(
    tmp_path, rules, capsys, variant, cast_line, error
):
    """Before: only the dtype error ("RuntimeError: expected scalar type Double but found Float",
    or "returned torch.float32 for a torch.float64 input"). After: the rule, and the cast's line."""
    source = (Path(__file__).parent / "rule_breakers.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if cast_line in text)
    code, out, err = _check(tmp_path, capsys, variant)
    assert code == 1, (out, err)
    detail = _failure(out, variant, "float64_at_scale")
    assert (
        f": ERROR -: ContractError: mixers must accept float64 (a .float() cast at rule_breakers.py:{line}?): "
        "with a float64 input, " in detail
    ), detail
    assert error.format(line=line) in detail, detail
