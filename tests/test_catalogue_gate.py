"""The catalogue, gate part (issue 28, items 5 and 7): a store that fills up while the
gate's verdicts are written, and gate messages that name the broken rule. Each case runs
`attnbench check` in this process; the rule-breaking variants (tests/rule_breakers.py) load
through a real entry point, so every CLI call builds a fresh plugin manager."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from attnbench.cli import main
from attnbench.store import database
from tests.helpers import fake_distribution

SHORT = ["--long-T", "256"]  # the finite check's length: enough for these variants, and fast


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code)


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

def test_a_store_that_fills_up_while_verdicts_are_written_says_so_and_keeps_what_it_held(
        tmp_path, monkeypatch, capsys):
    """Before: a sqlite3 traceback, "database or disk is full" and then "cannot rollback - no
    transaction is active". After: a StoreError naming the store, exit 2, stored rows intact."""
    monkeypatch.setenv("ATTNBENCH_PLUGINS", "softmax")
    path = tmp_path / "st.sqlite"
    assert _check(tmp_path, capsys, "softmax")[0] == 0
    with sqlite3.connect(path) as db:
        before = db.execute("SELECT * FROM checks ORDER BY check_name").fetchall()
    assert len(before) == 10

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
