"""A synthetic results store for report tests, written through the public store API (no
training): a tuned text experiment decided on loss, an untuned recall experiment decided on
answer accuracy per number of key-value pairs, a speed sweep with repeated timing rounds,
and published expectations that agree, disagree and stay undetermined."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attnbench.gate.checks import CheckResult
from attnbench.store.database import Metric, Result, RunRecord, Store

SUITE = "screen"
VARIANTS = ("softmax", "linear", "window")
SEEDS = (0, 1, 2, 3, 4, 5)  # 6 paired seeds: the fewest at which a paired decision can be made
PAIRS = (4, 16, 32)
# Test loss per seed of the final runs (text): linear clearly worse, window within the margin.
TEXT_TEST = {
    "softmax": (2.10, 2.12, 2.11, 2.12, 2.11, 2.10),
    "linear": (2.26, 2.29, 2.27, 2.27, 2.26, 2.29),
    "window": (2.11, 2.115, 2.112, 2.11, 2.112, 2.115),
}
# Test answer accuracy per seed at each number of pairs (recall): linear equivalent at 4 pairs and
# worse at 16 and 32; window spread too wide to decide at any number of pairs.
RECALL_TEST = {
    "softmax": {
        4: (1.00, 0.99, 1.00, 1.00, 1.00, 0.99),
        16: (0.98, 0.97, 0.99, 0.99, 0.98, 0.97),
        32: (0.95, 0.97, 0.96, 0.96, 0.95, 0.97),
    },
    "linear": {
        4: (0.99, 0.99, 0.985, 0.99, 0.985, 0.99),
        16: (0.70, 0.75, 0.72, 0.75, 0.72, 0.70),
        32: (0.40, 0.44, 0.41, 0.44, 0.41, 0.40),
    },
    "window": {
        4: (0.97, 1.00, 0.99, 0.93, 1.00, 0.99),
        16: (0.60, 0.95, 0.80, 0.80, 0.95, 0.60),
        32: (0.50, 0.95, 0.70, 0.70, 0.95, 0.50),
    },
}
STATE = {"softmax": 32768, "linear": 4224, "window": 8192}  # fp32 elements at the training length
# Train-step mean time (s) per T: linear slower at 256, faster at 1024.
STEP = {"softmax": {256: 0.010, 1024: 0.100}, "linear": {256: 0.0125, 1024: 0.077}, "window": {256: 0.011, 1024: 0.060}}
TEXT_LRS = (3e-4, 1e-3, 3e-3, 1e-2)
TEXT_CHOSEN = {"softmax": 3e-3, "linear": 1e-2, "window": 3e-3}
DECOY_TEST_LOSS = 9.99  # tuning runs carry this: it must never reach the headline

EXPECTATIONS_TEXT = [
    {
        "claim": "a sliding window matches attention on short-range text",
        "source": "Longformer (Beltagy et al. 2020)",
        "variant": "window",
        "versus": None,
        "outcome": "equivalent",
        "setting": None,
    },
    {
        "claim": "linear attention matches softmax on language modelling",
        "source": "a made-up optimistic claim",
        "variant": "linear",
        "versus": None,
        "outcome": "equivalent",
        "setting": None,
    },
]
EXPECTATIONS_RECALL = [
    {
        "claim": "linear attention falls behind on recall with many pairs",
        "source": "Zoology (Arora et al. 2023)",
        "variant": "linear",
        "versus": None,
        "outcome": "worse",
        "setting": {"num_kv_pairs": 32},
    },
    {
        "claim": "a window cannot recall beyond its span",
        "source": "Based (Arora et al. 2024)",
        "variant": "window",
        "versus": None,
        "outcome": "worse",
        "setting": {"num_kv_pairs": 32},
    },
]


def protocol_dict(
    metric: str, expectations: list[dict[str, Any]], tuning: dict[str, Any] | None, baselines: list[str] | None = None
) -> dict[str, Any]:
    """A recorded protocol; ``baselines`` None records it as stores did before protocol.baselines."""
    return {
        "tune": True,
        "baseline": "softmax",
        "interval": True,
        "choose_on": "val",
        "report_on": "test",
        "metric": metric,
        "margin": 0.05,
        "tuning": tuning,
        "expectations": expectations,
        "splits": {"train": "head", "val": "slice", "test": "tail"},
        **({"baselines": baselines} if baselines else {}),
    }


def record(
    key: str,
    experiment: str,
    kind: str,
    variant: str,
    seed: int | None,
    coords: dict[str, Any],
    config: dict[str, Any],
    summary: dict[str, Any],
    results: list[Result] | None = None,
    status: str = "done",
    suite: str = SUITE,
) -> RunRecord:
    """One run row of the synthetic suite (model d64 x 2 layers, gate passed)."""
    return RunRecord(
        cell_key=f"{suite}-{key}",
        suite=suite,
        experiment=experiment,
        kind=kind,
        variant=variant,
        status=status,
        seed=seed,
        coords={"variant": variant, "model": 0, "d_model": 64, "n_layer": 2, "seed": seed, **coords},
        config={"model": {"d_model": 64, "n_layer": 2, "n_head": 2}, **config},
        provenance={
            "git": {"commit": "c0ffee", "dirty": False},
            "device": "cpu:test",
            "gate": {"key": f"gate-{variant}", "failed": []},
        },
        summary=summary,
        started_at=100.0,
        finished_at=110.0,
        results=results or [],
    )


def _text_runs(baselines: list[str] | None) -> list[RunRecord]:
    tuning = {"seeds": [0], "budget": {"steps": 50}, "eta": 2}
    protocol = protocol_dict("loss", EXPECTATIONS_TEXT, tuning, baselines)
    out = []
    for v in VARIANTS:
        chosen = TEXT_CHOSEN[v]
        # rung 0: every point at 50 steps; rung 1: the best two (the chosen one and its neighbour) at 100
        rung0 = {lr: 2.6 + abs(TEXT_LRS.index(lr) - TEXT_LRS.index(chosen)) * 0.1 for lr in TEXT_LRS}
        rung1 = {lr: loss - 0.2 for lr, loss in sorted(rung0.items(), key=lambda kv: kv[1])[:2]}
        for rung, points in enumerate((rung0, rung1)):
            for lr, loss in points.items():
                out.append(
                    record(
                        f"text-{v}-t{rung}-{lr}",
                        "text",
                        "train",
                        v,
                        0,
                        {"lr": lr, "stage": "tune", "rung": rung},
                        {"train": {"budget": {"steps": 50 * 2**rung}}},
                        {
                            "val_loss": loss,
                            "test_loss": DECOY_TEST_LOSS,
                            "state_elements": STATE[v],
                            "protocol": protocol,
                        },
                    )
                )
        for seed, test in zip(SEEDS, TEXT_TEST[v], strict=True):
            out.append(
                record(
                    f"text-{v}-final-{seed}",
                    "text",
                    "train",
                    v,
                    seed,
                    {"lr": chosen, "stage": "final"},
                    {"train": {"budget": {"steps": 400}}},
                    {"val_loss": test - 0.01, "test_loss": test, "state_elements": STATE[v], "protocol": protocol},
                )
            )
    return out


def _recall_runs(baselines: list[str] | None) -> list[RunRecord]:
    protocol = protocol_dict("accuracy", EXPECTATIONS_RECALL, None, baselines)
    config = {
        "data": {"source": "task", "task": "mqar", "eval_settings": [{"num_kv_pairs": k} for k in PAIRS]},
        "train": {"budget": {"steps": 300}},
    }
    out = []
    for v in VARIANTS:
        for lr, worse in ((1e-3, 0.0), (3e-3, 0.3)):  # untuned grid: the lower validation loss (1e-3) is chosen
            for i, seed in enumerate(SEEDS):
                accs = {k: max(0.0, RECALL_TEST[v][k][i] - worse) for k in PAIRS}
                results = [
                    Result(name, value, "", {"split": "test", "task": "mqar", "num_kv_pairs": k})
                    for k, a in accs.items()
                    for name, value in (("accuracy", a), ("loss", 3.0 * (1 - a)))
                ]
                mean_acc = sum(accs.values()) / len(accs)
                out.append(
                    record(
                        f"recall-{v}-{lr}-{seed}",
                        "recall",
                        "train",
                        v,
                        seed,
                        {"lr": lr},
                        config,
                        {
                            "val_loss": 3.0 * (1 - mean_acc) + 0.01,
                            "test_loss": 3.0 * (1 - mean_acc),
                            "test_accuracy": mean_acc,
                            "state_elements": STATE[v] // 2,
                            "protocol": protocol,
                        },
                        results,
                    )
                )
    return out


def _speed_runs(paths: dict[str, dict[str, Any]]) -> list[RunRecord]:
    out = []
    for v in VARIANTS:
        path = paths.get(v, {})
        results = []
        for T, mean in STEP[v].items():
            for mode, scale in (("train_step", 1.0), ("forward", 0.3)):
                noisy = v == "window" and mode == "forward" and T == 1024
                tags = {
                    "mode": mode,
                    "T": T,
                    "status": "ok",
                    "mean_s": mean * scale,
                    "stddev_s": mean * scale * 0.03,
                    "rounds": 7,
                    "backend": "math",
                    "fallback": bool(path.get("fallback")),
                    "path": path,
                    "noisy": noisy,
                    "noisy_reason": "coefficient of variation 25% > 20%" if noisy else None,
                    "attempts": 2,
                }
                results += [
                    Result("time_s", mean * scale, "s", tags),
                    Result("peak_memory_bytes", 1e5 * T, "B", {**tags, "memory_method": "test"}),
                ]
        out.append(record(f"speed-{v}", "speed", "speed", v, 0, {}, {}, {}, results))
    fit = Result(
        "slope",
        0.9,
        "",
        {
            "mode": "train_step",
            "quantity": "time",
            "model": 0,
            "ci95": [0.2, 1.6],
            "n_points": 2,
            "T_min": 256,
            "T_max": 1024,
            "flags": ["95% interval [0.20, 1.60] is wider than +-0.25"],
        },
    )
    out.append(record("speed-fit-linear", "speed", "speed_fit", "linear", None, {}, {}, {}, [fit]))
    return out


def write_store(
    path: Path,
    extra: Sequence[RunRecord] = (),
    baselines: list[str] | None = None,
    speed_paths: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """The synthetic store at ``path`` (every trust-gate check passed), with ``extra`` runs; its
    protocols compare with ``baselines`` (default: softmax alone, recorded as protocol.baseline);
    ``speed_paths``: a variant's describe_path() as its timed points record it (default: none)."""
    with Store(path) as store:
        for run in [*_text_runs(baselines), *_recall_runs(baselines), *_speed_runs(speed_paths or {}), *extra]:
            store.save_run(run)
        for v in VARIANTS:
            store.save_checks(f"gate-{v}", v, [CheckResult("no_future_leak_forward", "pass", 0.0, 1e-5, "ok")], {})
    return path


def time_to_learn_store(
    path: Path,
    suite: str,
    reached: dict[str, list[int | None]],
    test_acc: Mapping[str, Sequence[float]] | None = None,
) -> Path:
    """A recall suite whose runs' validation accuracy jumps from 0.3 to 0.95 at ``reached``[variant][seed]
    (None: never within its 3000 steps), evaluated every 200 steps; test accuracy ``test_acc`` (0.5)."""
    protocol = {**protocol_dict("accuracy", [], None), "tune": False}
    with Store(path) as store:
        for v, steps in reached.items():
            for seed, step in enumerate(steps):
                run = record(
                    f"{v}-{seed}",
                    "recall",
                    "train",
                    v,
                    seed,
                    {},
                    {"data": {"source": "task", "task": "mqar"}, "train": {"budget": {"steps": 3000}}},
                    {
                        "val_loss": 1.0,
                        "test_loss": 1.0,
                        "test_accuracy": test_acc[v][seed] if test_acc else 0.5,
                        "protocol": protocol,
                    },
                    suite=suite,
                )
                run.metrics = [
                    Metric(s, s * 64, s / 100, "val/accuracy", 0.95 if step is not None and s >= step else 0.3)
                    for s in range(200, 3001, 200)
                ]
                store.save_run(run)
    return path
