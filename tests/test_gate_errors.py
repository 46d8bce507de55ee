"""A builder that raises keeps its exception chain in the gate's verdict (issue 57, item 3):
type, message and cause, in the stored detail and under `attnbench check --verbose`."""

from __future__ import annotations

from attnbench.store.database import Store
from tests.helpers import fake_distribution, run_cli

CAUSE = "caused by ValueError: invalid literal for int() with base 10: 'wide'"


def test_check_verbose_and_store_keep_the_builders_exception_chain(tmp_path):
    env = {
        **fake_distribution(tmp_path, "broken-dist", "broken", module="tests.broken_variants"),
        "ATTNBENCH_PLUGINS": "softmax,broken",
    }
    store = tmp_path / "s.sqlite"
    out = run_cli("check", "raises_from", "--verbose", "--store", str(store), env=env)
    assert out.returncode == 1, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("raises_from / ")]
    assert lines, out.stdout
    for line in lines:
        if ": SKIP" in line:  # autocast on a CPU: nothing to build
            continue
        assert ": ERROR" in line and "RuntimeError: cannot build layer 0 (at broken_variants.py:" in line, line
        assert CAUSE in line, line
    with Store(store) as opened:
        rows = [r for r in opened.checks(variant="raises_from") if r["status"] == "error"]
    assert rows and all(CAUSE in r["detail"] and r["detail"].startswith("RuntimeError: ") for r in rows)
