"""The trust gate: built-in variants pass; each deliberately broken variant is caught by the
right check; contract violations and hangs become errors without stopping the others."""

from __future__ import annotations

import dataclasses
import re
import threading
import time

import pytest
import torch

from attnbench.gate.checks import CHECKS, check_variants, format_table, passed, run_checks
from attnbench.gate.verdicts import gate_key_inputs
from attnbench.plugins.attention import softmax
from attnbench.registry.identity import file_sha256
from attnbench.registry.loader import get_plugin_manager, load_registry
from attnbench.store.provenance import content_key
from tests import broken_variants

BUILTINS = ["additive", "future", "heinsen", "linear", "softmax", "windowed"]

# variant -> the checks that must fail; every other check must pass or skip.
CAUGHT_BY = {
    "leaky": {"no_future_leak_forward", "no_future_leak_backward", "leak_at_scale"},
    # a gradient no value change explains: the finite differences see it too
    "grad_leaky": {"no_future_leak_backward", "grad_finite_difference"},
    "drifty": {"incremental_equals_parallel", "incremental_at_scale"},
    "overflowy": {"finite_long_inputs", "leak_at_scale", "float64_at_scale"},
    # the float64 run builds the mixer a second time: different gains, different outputs
    "nondeterministic": {"deterministic", "float64_at_scale"},
    # causal at init scale, leaks at trained scale; its backward treats the leaking max as a constant
    "chunk_normalised": {"leak_at_scale", "grad_finite_difference"},
    "wrong_state_size": {"declared_facts"},
    "own_model_leaky": {"no_future_leak_forward"},  # the backbone with its mixer is fine
    "undeclared_aux": {"declared_facts"},
}
# checks a variant may fail besides: two runs of one nondeterministic float64 mixer differ, so its
# finite differences are no derivative (whether they exceed the check's noise margin is chance)
MAY_ALSO = {"nondeterministic": {"grad_finite_difference"}}


@pytest.fixture(scope="module")
def broken():
    loaded = get_plugin_manager(extra_plugins=[("broken", broken_variants), ("softmax", softmax)], entry_points=False)
    return load_registry(loaded)


@pytest.fixture(scope="module")
def broken_results(broken):
    return check_variants([broken.get(n) for n in CAUGHT_BY], long_T=256, time_limit_s=120)


def _by_check(results):
    assert [r.check for r in results] == list(CHECKS)
    return {r.check: r for r in results}


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_variant_passes_every_applicable_check(name, registry):
    variant = registry.get(name)
    results = _by_check(run_checks(variant, long_T=1024, time_limit_s=300))
    bad = {c: r.detail for c, r in results.items() if r.status not in ("pass", "skip")}
    assert not bad, bad
    skipped = {c for c, r in results.items() if r.status == "skip"}
    no_decode = {"incremental_equals_parallel", "incremental_at_scale"} if variant.decode == "none" else set()
    assert skipped == {"autocast_at_scale"} | no_decode  # a CPU trains in fp32 unless asked
    assert "fp32 only on cpu" in results["autocast_at_scale"].detail
    assert "params: backbone" in results["declared_facts"].detail
    for check in ("leak_at_scale", "float64_at_scale"):  # verdicts name the magnitudes tried
        assert "magnitudes tried: weights x1, x4, x16" in results[check].detail, results[check].detail


def test_leak_only_at_trained_magnitudes_names_check_magnitude_and_position(broken_results):
    results = _by_check(broken_results["chunk_normalised"])
    assert results["no_future_leak_forward"].status == "pass"  # invisible at init scale
    leak = results["leak_at_scale"]
    assert leak.status == "fail" and leak.figure > 1e-2
    match = re.search(r"worst at weights x(\d+), perturbed after t=(\d+), first leaking position (\d+)", leak.detail)
    assert match, leak.detail
    assert int(match.group(1)) > 1 and int(match.group(3)) <= int(match.group(2))
    table = format_table({"chunk_normalised": broken_results["chunk_normalised"]})
    assert "chunk_normalised / leak_at_scale: FAIL" in table and "first leaking position" in table


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_broken_variant_is_caught_by_exactly_the_right_check(broken_results, name):
    results = _by_check(broken_results[name])
    failed = {c for c, r in results.items() if r.status == "fail"}
    assert CAUGHT_BY[name] <= failed <= CAUGHT_BY[name] | MAY_ALSO.get(name, set()), {
        c: r.detail for c, r in results.items()
    }
    assert all(r.status in ("pass", "skip") for c, r in results.items() if c not in failed)
    for c in failed:
        r = results[c]
        assert r.figure is None or r.tolerance is None or not r.figure <= r.tolerance
        assert r.detail


def test_failure_details_say_where(broken_results):
    drift = _by_check(broken_results["drifty"])["incremental_equals_parallel"]
    found = re.search(r"first over tolerance at position (\d+)", drift.detail)
    assert found, drift.detail
    first = int(found.group(1))
    assert 256 <= first < 280, drift.detail  # bf16 counts exactly only up to 256
    leak = _by_check(broken_results["leaky"])["no_future_leak_forward"]
    assert leak.figure > 1e-3 and "worst at backbone" in leak.detail
    nan = _by_check(broken_results["overflowy"])["finite_long_inputs"]
    assert "non-finite output" in nan.detail
    own = _by_check(broken_results["own_model_leaky"])["no_future_leak_forward"]
    assert "worst at own model" in own.detail
    facts = _by_check(broken_results["wrong_state_size"])["declared_facts"]
    assert "state holds 832 elements, state_size declares 416" in facts.detail
    aux = _by_check(broken_results["undeclared_aux"])["declared_facts"]
    assert "aux_loss=False declared, but layers 0, 1 return auxiliary losses" in aux.detail


def test_contract_violations_are_errors_and_other_variants_still_checked(broken):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    names = ["raises", "bad_shape", "bad_dtype", "softmax"]
    results = check_variants([broken.get(n) for n in names], long_T=256, time_limit_s=120)
    assert torch.equal(torch.rand(3), expected_next), "run_checks changed the caller's RNG state"
    assert all(
        r.status == "error" and "deliberately broken builder" in r.detail
        for r in results["raises"]
        if r.check != "autocast_at_scale"
    )
    assert _by_check(results["raises"])["autocast_at_scale"].status == "skip"  # CPU: never builds
    for name, word in (
        ("bad_shape", "shape (9, 9, 16) for input (9, 9, 32)"),  # one row per cut of T = 9, and the reference
        ("bad_dtype", "torch.float64 for a torch.float32 input"),
    ):
        by = _by_check(results[name])
        assert by["no_future_leak_forward"].status == "error"
        assert word in by["no_future_leak_forward"].detail
        for check in ("no_future_leak_backward", "finite_long_inputs", "deterministic"):
            assert by[check].status == "error", by[check]
    assert passed(results["softmax"]), results["softmax"]
    table = format_table(results)
    assert "softmax" in table and "raises / declared_facts: ERROR" in table
    assert table.splitlines()[-1] == "1/4 variants passed every check"


def test_hang_is_reported_as_timeout_and_abandoned(broken):
    start = time.perf_counter()
    try:
        results = run_checks(broken.get("hangs"), time_limit_s=1.0)
    finally:
        broken_variants.RELEASE.set()
    assert time.perf_counter() - start < 10
    assert results[0].status == "error" and results[0].detail.startswith("timed out after 1 s")
    assert [r.status for r in results] == ["error"] * len(CHECKS)
    assert all(r.detail.startswith("not run") for r in results[1:])
    for thread in threading.enumerate():  # released: the abandoned worker ends at once
        if thread.name == "attnbench-check-hangs":
            thread.join(10)
            assert not thread.is_alive()


def test_table_has_one_row_per_variant_and_column_per_check(broken_results):
    lines = format_table(broken_results).splitlines()
    assert lines[0].split() == [
        "variant",
        "leak-fwd",
        "leak-bwd",
        "incremental",
        "finite",
        "determinism",
        "facts",
        "leak@scale",
        "incr@scale",
        "f64@scale",
        "grad@scale",
        "grad-fd",
        "amp@scale",
    ]
    rows = {line.split()[0]: line for line in lines[1 : 1 + len(CAUGHT_BY)]}
    assert set(rows) == set(CAUGHT_BY)
    assert rows["leaky"].split()[1:5] == ["FAIL", rows["leaky"].split()[2], "FAIL", rows["leaky"].split()[4]]
    assert "drifty / incremental_equals_parallel: FAIL" in "\n".join(lines)
    assert lines[-1] == f"0/{len(CAUGHT_BY)} variants passed every check"


def test_gate_key_tracks_code_version(broken):
    variant = broken.get("softmax")
    inputs = gate_key_inputs(variant, "cpu")
    assert inputs["name"] == "softmax" and inputs["plugin"] == "softmax"
    assert inputs["sources"]["attention/softmax.py"] == file_sha256(softmax.__file__)
    assert inputs["device"].startswith("cpu:") and inputs["torch"] == torch.__version__
    assert len(inputs["gate_code"]) == 16  # a content hash of the gate's packages
    bumped = gate_key_inputs(dataclasses.replace(variant, version="2"), "cpu")
    assert content_key(bumped) != content_key(inputs)
    assert content_key(gate_key_inputs(variant, "cpu")) == content_key(inputs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA only: bf16/fp16 autocast checks need a GPU")
def test_autocast_at_scale_on_cuda_records_per_dtype_tolerances(registry):
    results = _by_check(run_checks(registry.get("softmax"), device="cuda", long_T=256))
    amp = results["autocast_at_scale"]
    assert amp.status == "pass", amp.detail
    assert "bf16 x16: leak" in amp.detail and "(tol 0.02)" in amp.detail and "fp16 x4: leak" in amp.detail


def test_bf16_autocast_on_a_cpu_passes_softmax_and_catches_a_leak_at_bf16_tolerance(broken):
    """A CPU run that trains in bf16 gets the autocast checks with bf16's tolerances."""
    good, leaky = (_by_check(run_checks(broken.get(n), long_T=128, autocast=("bf16",))) for n in ("softmax", "leaky"))
    assert good["autocast_at_scale"].status == "pass", good["autocast_at_scale"].detail
    assert "bf16 x16: leak" in good["autocast_at_scale"].detail and "fp16" not in good["autocast_at_scale"].detail
    assert "bf16 autocast: max|y|" in good["finite_long_inputs"].detail
    assert leaky["autocast_at_scale"].status == "fail" and "FAIL at" in leaky["autocast_at_scale"].detail


def test_mamba2_stays_finite_under_fp16_autocast_at_weights_x4(registry):
    """The H200 gate (2026-11-27) found Mamba2's SSD output overflowing fp16 at weights x4 with
    an extreme token: the scan handed y back in fp16 before the gated RMSNorm rescaled it. CPU
    autocast runs the same fp16 casts, so the regression is caught here too."""
    amp = _by_check(run_checks(registry.get("mamba2"), long_T=128, autocast=("fp16",)))["autocast_at_scale"]
    assert amp.status == "pass", amp.detail
    assert "fp16 x4: leak 0" in amp.detail
