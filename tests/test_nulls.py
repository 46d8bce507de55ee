"""Measured null levels (issue 55): binding-free predictors on hand-built batches, the nulls of
the built-in recall tasks against the shortcuts that beat their old declared levels, a noise
task at chance, a task's opt-out honoured, and a bad declared level refused at load."""

from __future__ import annotations

import math
import re
import types

import pytest
import torch

from attnbench import IGNORE, Task, TaskBatch, hookimpl
from attnbench.contract.task import NULL_PREDICTORS
from attnbench.data.floors import task_floors
from attnbench.data.loading import load_corpus
from attnbench.data.nulls import DESCRIPTIONS, accuracy, fit_predictors, scored
from attnbench.data.spec import DataSpec
from attnbench.data.tasks import load_task_data
from attnbench.errors import PluginError
from attnbench.experiments.registry import expand_suite
from attnbench.experiments.train.floors import floor_rows, floor_summary
from attnbench.plan.suite import load_suite
from attnbench.plugins.attention import softmax
from attnbench.plugins.tasks.synthetic import MQAROptions
from attnbench.registry.loader import get_plugin_manager, load_registry
from tests.helpers import write_suite


def _batch(inputs: list[list[int]], targets: list[list[int]]) -> TaskBatch:
    return TaskBatch(torch.tensor(inputs), torch.tensor(targets))


def _score(name: str, train: TaskBatch, test: TaskBatch, vocab: int = 10) -> float:
    return accuracy(fit_predictors(train, vocab, [name])[name], test)


# The predictors on batches whose answers are known ------------------------------------------


def test_the_predictor_names_are_the_contract_s():
    assert tuple(DESCRIPTIONS) == NULL_PREDICTORS


def test_position_majority_is_the_majority_training_answer_at_each_position():
    X = IGNORE
    train = _batch([[0] * 3] * 3, [[X, 3, 5], [X, 3, 6], [X, 4, 5]])  # position 1: 3, position 2: 5
    test = _batch([[0] * 3] * 2, [[X, 3, 6], [X, 4, 5]])
    assert _score("position_majority", train, test) == 0.5


def test_answer_frequency_counts_answer_tokens_up_to_the_position_and_shares_ties():
    X = IGNORE
    train = _batch([[0, 0, 0, 0]] * 3, [[X, X, X, 7], [X, X, X, 7], [X, X, X, 5]])  # answers {5, 7}; 7 most often
    test = _batch(
        [
            [5, 7, 7, 5],  # at 3: 7 twice, 5 twice -> tie {5, 7}, answer 5: 1/2
            [7, 1, 7, 5],  # at 2: 7 twice -> 7, answer 7: 1 (the 5 at 3 comes later)
            [1, 2, 3, 4],  # at 3: no answer token yet -> the most frequent training answer 7: 1
            [5, 5, 1, 7],  # at 1: 5 -> 5, answer 7: 0
        ],
        [[X, X, X, 5], [X, X, 7, X], [X, X, X, 7], [X, 7, X, X]],
    )
    credit = fit_predictors(train, 10, ["answer_frequency"])["answer_frequency"](test)
    assert credit.tolist() == [0.5, 1.0, 1.0, 0.0]


def _copy_batch(gen: torch.Generator, n: int, rule) -> TaskBatch:
    """Random inputs (vocabulary 50, length 12); two scored positions per example, whose answers
    ``rule(inputs, rank, t)`` gives."""
    inputs = torch.randint(0, 50, (n, 12), generator=gen)  # (n, 12)
    targets = torch.full((n, 12), IGNORE)  # (n, 12)
    first = torch.randint(4, 8, (n,), generator=gen)  # (n,) the first scored position
    for r, t in enumerate((first, first + torch.randint(1, 5, (n,), generator=gen))):
        targets[torch.arange(n), t] = rule(inputs, r, t)
    return TaskBatch(inputs, targets)


def test_copy_by_rank_copies_a_fixed_position_per_rank():
    gen = torch.Generator().manual_seed(0)
    rule = lambda x, r, t: x[:, 1 + 2 * r]  # noqa: E731 (the r-th answer is the input at 1 + 2r)
    train, test = _copy_batch(gen, 400, rule), _copy_batch(gen, 200, rule)
    assert _score("copy_by_rank", train, test, 50) == 1.0
    assert _score("copy_by_offset", train, test, 50) < 0.5  # the offset varies: no fixed one finds it


def test_copy_by_offset_copies_a_fixed_distance_back():
    gen = torch.Generator().manual_seed(1)
    rule = lambda x, r, t: x[torch.arange(len(x)), t - 3]  # noqa: E731
    train, test = _copy_batch(gen, 400, rule), _copy_batch(gen, 200, rule)
    assert _score("copy_by_offset", train, test, 50) == 1.0
    assert _score("copy_by_rank", train, test, 50) < 0.5


def test_copy_by_rank_and_position_keys_on_the_position_and_backs_off_to_the_rank():
    gen = torch.Generator().manual_seed(2)
    rule = lambda x, r, t: x[torch.arange(len(x)), (t % 2) * 2]  # noqa: E731 (odd t: position 2, even: 0)
    train, test = _copy_batch(gen, 400, rule), _copy_batch(gen, 200, rule)
    assert _score("copy_by_rank_and_position", train, test, 50) == 1.0
    assert _score("copy_by_rank", train, test, 50) < 0.75  # one position per rank: right about half the time
    # a (rank, position) never seen in training: copy_by_rank's choice for the rank
    fitted = fit_predictors(train, 50, ["copy_by_rank", "copy_by_rank_and_position"])
    X = IGNORE
    unseen = _batch([[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2]], [[X, X, X, 9, X, X, X, X, X, X, X, X]])  # rank 0 at t=3
    assert fitted["copy_by_rank_and_position"](unseen).tolist() == fitted["copy_by_rank"](unseen).tolist()


def test_a_copy_never_reads_past_the_scored_position():
    X = IGNORE
    train = _batch([[1, 2, 3, 4]] * 4, [[X, 3, X, X]] * 4)  # the answer is the next input, never visible
    assert _score("copy_by_rank", train, train) == 0.0
    assert _score("copy_by_offset", train, train) == 0.0


# The built-in tasks' nulls ---------------------------------------------------------------


def _nulls(registry, task: str, split: str = "test", **data) -> list:
    spec = DataSpec(source="task", task=task, **data)
    return [(options, null) for s, options, null in task_floors(load_corpus(spec, registry)) if s == split]


def test_mqar_with_quiet_fill_has_a_null_above_one_in_k(registry):
    settings = [{"num_kv_pairs": k} for k in (2, 4, 6)]
    data = load_task_data(
        DataSpec(
            source="task",
            task="mqar",
            task_options={"vocab_size": 64, "seq_len": 24, "random_non_queries": False},
            train_settings=settings,
            eval_settings=settings,
            train_examples=6000,
            val_examples=64,
            test_examples=3000,
        ),
        registry,
    )
    tests = {options.num_kv_pairs: batch for options, batch in data.tests}
    nulls = {options.num_kv_pairs: null for split, options, null in task_floors(data) if split == "test"}
    for k, issue in ((2, 0.552), (4, 0.316), (6, 0.266)):
        batch = tests[k]
        s = scored(batch)
        order_rule = float((batch.inputs[s.n, 2 * s.r + 1] == s.y).double().mean())  # the r-th query asks pair r
        null = nulls[k]
        assert null.levels["declared"] == pytest.approx(1 / k)
        assert null.value >= order_rule > 1 / k + 0.04  # the order rule on these examples, at least
        assert null.value == pytest.approx(issue, abs=0.03)  # the issue's figure, up to sampling
        assert null.predictor.startswith("copy_by_")
    # the position-only Bayes rule (K, rank, position, previous answer's position; no key looked up) beats
    # the rank rules at 6 pairs, where the issue measured it at 0.288 against the stored 0.281
    assert nulls[6].levels["copy_by_layout"] > nulls[6].levels["copy_by_rank"]
    assert nulls[6].predictor == "copy_by_layout"


def _frequency_rule(batch: TaskBatch, values: range) -> float:
    """'Answer the most frequent value seen so far' (ties shared), one position at a time."""
    credit = []
    for row, target in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        for t, y in enumerate(target):
            if y == IGNORE:
                continue
            seen = [row[: t + 1].count(v) for v in values]
            ties = [v for v, c in zip(values, seen, strict=True) if c == max(seen)]
            credit.append(1 / len(ties) if y in ties else 0.0)
    return sum(credit) / len(credit)


def test_mad_recall_null_is_at_least_the_frequency_rule(registry):
    options = {"vocab_size": 16, "seq_len": 32}
    data = load_task_data(
        DataSpec(source="task", task="mad_recall", task_options=options, train_examples=3200, test_examples=256),
        registry,
    )
    (split, _, null), (_, batch) = task_floors(data)[-1], data.tests[0]
    assert split == "test"
    rule = _frequency_rule(batch, range(8, 16))
    assert null.value >= rule - 1e-12 and rule > 0.33  # ~0.369 in the issue, on a larger sample
    assert null.value > null.levels["declared"] + 0.2  # 1/Vk = 0.125 was never the null


def test_an_opted_out_predictor_is_not_a_candidate(registry):
    spec = {"task_options": {"vocab_size": 16, "seq_len": 32}, "train_examples": 800, "test_examples": 128}
    [(_, null)] = _nulls(registry, "mad_compression", **spec)
    assert set(null.levels) == {"position_majority", "answer_frequency", "declared"}
    assert null.value < 0.5
    data = load_task_data(DataSpec(source="task", task="mad_compression", **spec), registry)
    train = TaskBatch(data.train_inputs, data.train_targets)
    assert _score("copy_by_rank", train, data.tests[0][1], 16) == 1.0  # copying *is* the task


# Third-party tasks, registered through a fresh plugin manager ------------------------------------


def _noise(options, n: int, seed: int) -> TaskBatch:
    """Random tokens; four scored positions whose answers are fresh random tokens (vocabulary 10)."""
    gen = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, 10, (n, 16), generator=gen)  # (n, 16)
    targets = torch.full((n, 16), IGNORE)  # (n, 16)
    targets[:, 8::2] = torch.randint(0, 10, (n, 4), generator=gen)  # (n, 4)
    return TaskBatch(inputs, targets)


def _registry_with(task: Task):
    plugin = types.SimpleNamespace(attnbench_register_tasks=hookimpl(lambda register: register(task)))
    return load_registry(get_plugin_manager([("softmax", softmax), ("thirdparty", plugin)], entry_points=False))


def _task(name: str = "noise", **fields) -> Task:
    return Task(name, MQAROptions, _noise, vocab_size=lambda o: 10, seq_len=lambda o: 16, **fields)


def test_a_task_whose_answers_are_noise_has_a_null_near_chance():
    registry = _registry_with(_task())
    [(_, null)] = _nulls(registry, "noise", train_examples=2000, test_examples=3000)
    assert set(null.levels) == set(NULL_PREDICTORS)
    assert null.value == pytest.approx(0.1, abs=0.015)


def test_a_task_s_null_predictors_are_honoured_and_stored():
    registry = _registry_with(_task(null_predictors=("position_majority",), guess_accuracy=lambda o, b: 0.0))
    data = load_corpus(DataSpec(source="task", task="noise", train_examples=200, test_examples=100), registry)
    rows = floor_rows(data)
    assert [r.tags["split"] for r in rows] == ["val", "test"]
    for row in rows:
        assert row.name == "guess_accuracy" and set(row.tags["null_levels"]) == {"position_majority", "declared"}
        assert row.tags["null_predictor"] == "position_majority"
        assert row.value == row.tags["null_levels"]["position_majority"]
    summary = floor_summary(data, rows)
    assert summary["test_guess_accuracy"] == rows[1].value
    assert summary["floor_method"].startswith("best of binding-free predictors: position_majority (")


def test_an_unknown_null_predictor_is_refused_at_registration_naming_task_and_predictor():
    plugin = types.SimpleNamespace(
        attnbench_register_tasks=hookimpl(lambda register: register(_task(null_predictors=("copy_everything",))))
    )
    with pytest.raises(PluginError, match=r"task 'noise': unknown null predictor\(s\) \['copy_everything'\]"):
        load_registry(get_plugin_manager([("thirdparty", plugin)], entry_points=False))


@pytest.mark.parametrize("level", [1.5, -0.25, math.nan, math.inf, "0.5", True])
def test_an_out_of_range_declared_level_is_refused_at_load_naming_task_and_value(level, tmp_path):
    registry = _registry_with(_task("badlevel", guess_accuracy=lambda o, b: level))
    suite = write_suite(
        tmp_path / "third.yaml",
        """
        version: 1
        name: third
        experiments:
          - name: e
            kind: train
            variants: [softmax]
            data: {source: task, task: badlevel, train_examples: 50, val_examples: 8}
            train: {budget: {steps: 1}, batch_size: 2, seq_len: 16}
        """,
    )
    why = rf"task 'badlevel' declared guess_accuracy {re.escape(repr(level))} at options .*must be a float in \[0, 1\]"
    with pytest.raises(PluginError, match=why):  # as `attnbench run` plans its cells, before any trains
        expand_suite(load_suite(suite), registry, corpus_hash=lambda spec: load_corpus(spec, registry).sha256)
