"""Synthetic tasks (attnbench.plugins.tasks.synthetic) and the occluded-digits task (attnbench.plugins.tasks.digits),
through the registry: determinism, answers correct by construction, only answers scored,
option validation, coordinates, and the digits completion evaluator end to end."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from attnbench import Backbone, LanguageModel, ModelConfig
from attnbench.contract.task import IGNORE, TaskBatch
from attnbench.errors import AttnbenchError
from attnbench.registry.loader import load_registry

SYNTHETIC = ("mqar", "noisy_recall", "selective_copy", "induction")
SMALL = {  # small settings (small vocabularies make accidental collisions likely)
    "mqar": {"vocab_size": 40, "seq_len": 48, "num_kv_pairs": 6},
    "noisy_recall": {"vocab_size": 64, "seq_len": 48, "num_kv_pairs": 5, "neighbours": 3},
    "selective_copy": {"vocab_size": 6, "seq_len": 40, "num_tokens": 10},
    "induction": {"vocab_size": 12, "seq_len": 40, "num_triggers": 3},
    "digits": {},
}


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def _make(registry, name, **overrides):
    task = registry.get_task(name)
    return task, task.make_options({**SMALL[name], **overrides})


def test_registry_lists_tasks_with_their_plugins(registry):
    for name in SYNTHETIC:
        assert registry.get_task(name).plugin == "synthetic"
        assert any(f.endswith("plugins/tasks/synthetic.py") for f in registry.get_task(name).source_files)
    assert registry.get_task("digits").plugin == "digits"
    assert registry.get_task("digits").evaluate is not None
    assert not [e for e in registry.errors if e.plugin in ("synthetic", "digits")]


@pytest.mark.parametrize("name", [*SYNTHETIC, "digits"])
def test_generate_is_deterministic_and_well_formed(registry, name):
    task, opts = _make(registry, name)
    torch.manual_seed(123)
    global_state = torch.get_rng_state()
    a, b, c = task.generate(opts, 300, 7), task.generate(opts, 300, 7), task.generate(opts, 300, 8)
    assert torch.equal(torch.get_rng_state(), global_state)  # local generator only
    assert isinstance(a, TaskBatch)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)
    T, V = task.seq_len(opts), task.vocab_size(opts)
    for t in (a.inputs, a.targets):
        assert t.shape == (300, T) and t.dtype == torch.int64
    assert a.inputs.min() >= 0 and a.inputs.max() < V
    scored = a.targets[a.targets != IGNORE]
    assert scored.numel() and scored.min() >= 0 and scored.max() < V
    assert task.generate(opts, 0, 1).inputs.shape == (0, T)


def _pair_positions(row: torch.Tensor, tok: int, limit: int) -> list[int]:
    return [i for i in range(0, limit, 2) if int(row[i]) == tok]


@pytest.mark.parametrize("random_fill", [True, False])
def test_mqar_targets_are_the_values_bound_to_the_queried_keys(registry, random_fill):
    task, opts = _make(registry, "mqar", random_non_queries=random_fill)
    V, T, K = opts.vocab_size, opts.seq_len, opts.num_kv_pairs
    batch = task.generate(opts, 200, 0)
    for x, y in zip(batch.inputs, batch.targets, strict=True):
        keys, values = x[0 : 2 * K : 2], x[1 : 2 * K : 2]
        assert len(set(keys.tolist())) == K and len(set(values.tolist())) == K
        assert keys.min() >= 1 and keys.max() < V // 2 and values.min() >= V // 2
        pos = (y != IGNORE).nonzero().flatten().tolist()
        assert len(pos) == K  # one scored position per pair, nothing else
        assert all(p >= 2 * K and p % 2 == 0 for p in pos)
        assert sorted(x[pos].tolist()) == sorted(keys.tolist())  # each key queried once
        for p in pos:
            (first,) = _pair_positions(x, int(x[p]), 2 * K)
            assert int(y[p]) == int(x[first + 1])
        if not random_fill:
            rest = torch.ones(T, dtype=torch.bool)
            rest[: 2 * K] = False
            rest[pos] = False
            assert (x[rest] == 0).all()


def test_mqar_keys_uniform_and_query_gaps_follow_the_power_law(registry):
    task = registry.get_task("mqar")
    # Keys: 19 candidates, 4 per example (the iid-then-redraw path): each (slot, key) equally likely.
    opts = task.make_options({"vocab_size": 40, "seq_len": 64, "num_kv_pairs": 4})
    keys = task.generate(opts, 6000, 3).inputs[:, 0:8:2]  # (N, 4)
    counts = torch.stack([torch.bincount(keys[:, j] - 1, minlength=19) for j in range(4)]).double()
    expected = 6000 / 19
    chi2 = ((counts - expected) ** 2 / expected).sum().item()  # 72 degrees of freedom
    assert chi2 < 72 + 6 * (2 * 72) ** 0.5

    # Gaps: power_a=1 is uniform over the 28 even slots; power_a=0.01 puts queries early.
    def mean_gap(a: float) -> float:
        b = task.generate(task.make_options({"power_a": a}), 3000, 0)
        pos = (b.targets != IGNORE).nonzero()[:, 1].double()
        return ((pos - 8) / 2).mean().item()

    assert abs(mean_gap(1.0) - 13.5) < 0.5
    assert mean_gap(0.01) < 8.0


def test_noisy_recall_queries_are_neighbours_of_their_keys(registry):
    task, opts = _make(registry, "noisy_recall", noise_prob=0.5)
    m, K = opts.neighbours, opts.num_kv_pairs
    batch = task.generate(opts, 400, 1)
    changed = total = 0
    for x, y in zip(batch.inputs, batch.targets, strict=True):
        keys = x[0 : 2 * K : 2]
        blocks = ((keys - 1) // m).tolist()
        assert len(set(blocks)) == K and keys.min() >= 1 and keys.max() < 1 + m * ((opts.vocab_size // 2 - 1) // m)
        for p in (y != IGNORE).nonzero().flatten().tolist():
            q = int(x[p])
            j = blocks.index((q - 1) // m)  # the pair whose block holds the query token
            assert int(y[p]) == int(x[2 * j + 1])
            changed += q != int(keys[j])
            total += 1
    assert total == 400 * K and 0.44 < changed / total < 0.56
    _, exact = _make(registry, "noisy_recall", noise_prob=0.0)
    b = task.generate(exact, 50, 1)
    keys = b.inputs[:, 0 : 2 * K : 2]
    queried = b.inputs[b.targets != IGNORE].view(50, K)
    assert torch.equal(queried.sort(dim=1).values, keys.sort(dim=1).values)


def test_selective_copy_targets_are_the_data_tokens_in_order(registry):
    task, opts = _make(registry, "selective_copy")
    T, n = opts.seq_len, opts.num_tokens
    R = T - n
    batch = task.generate(opts, 300, 2)
    for x, y in zip(batch.inputs, batch.targets, strict=True):
        region = x[:R]
        data = region[region != 0]
        assert len(data) == n and data.min() >= 2  # n data tokens among blanks
        assert int(x[R]) == 1  # separator
        assert torch.equal(y[R:], data)  # copy, in order
        assert (y[:R] == IGNORE).all()
        assert torch.equal(x[R + 1 :], data[:-1])  # teacher forcing


def test_induction_targets_are_the_tokens_after_the_first_occurrence(registry):
    task, opts = _make(registry, "induction")
    T, G = opts.seq_len, opts.num_triggers
    batch = task.generate(opts, 300, 4)
    for x, y in zip(batch.inputs, batch.targets, strict=True):
        pos = (y != IGNORE).nonzero().flatten().tolist()
        assert len(pos) == G and all(p >= T // 2 for p in pos)
        assert len({int(x[p]) for p in pos}) == G
        for p in pos:
            where = (x == x[p]).nonzero().flatten().tolist()
            assert len(where) == 2 and where[1] == p and where[0] < T // 2  # exactly twice
            assert int(y[p]) == int(x[where[0] + 1])


@pytest.mark.parametrize(
    "name, raw, message",
    [
        ("mqar", {"num_kv_pairs": 20}, "needs seq_len >= 4*num_kv_pairs = 80"),
        ("mqar", {"vocab_size": 8, "num_kv_pairs": 4}, "raise vocab_size"),
        ("mqar", {"power_a": 0}, "power_a must be a finite number > 0"),
        ("mqar", {"num_kv_pairs": True}, "num_kv_pairs must be an integer"),
        ("mqar", {"random_non_queries": "yes"}, "random_non_queries must be true or false"),
        ("mqar", {"num_keys": 3}, "unknown option(s) ['num_keys']"),
        ("noisy_recall", {"neighbours": 1, "noise_prob": 0.5}, "needs neighbours >= 2"),
        ("noisy_recall", {"noise_prob": 1.5}, "noise_prob must be a number in [0, 1]"),
        ("noisy_recall", {"vocab_size": 20, "neighbours": 4, "num_kv_pairs": 4}, "key blocks"),
        ("selective_copy", {"num_tokens": 40, "seq_len": 64}, "needs seq_len >= 2*num_tokens = 80"),
        ("selective_copy", {"vocab_size": 2}, "vocab_size must be >= 3"),
        ("induction", {"num_triggers": 20, "seq_len": 64}, "needs seq_len >= 4*num_triggers = 80"),
        ("induction", {"vocab_size": 4, "num_triggers": 3}, "must exceed num_triggers + 1"),
        ("digits", {"visible_rows": 8}, "visible_rows must be < 8"),
        ("digits", {"subset": "test"}, "subset must be one of"),
        ("digits", {"temperature": -1.0}, "temperature must be a finite number >= 0"),
    ],
)
def test_invalid_options_are_clear_errors(registry, name, raw, message):
    with pytest.raises(ValueError) as err:
        registry.get_task(name).make_options(raw)
    assert message in str(err.value) and name in str(err.value)


def test_coords_name_the_difficulty_knobs(registry):
    expect = {
        "mqar": {"num_kv_pairs": 6, "seq_len": 48, "vocab_size": 40},
        "noisy_recall": {"num_kv_pairs": 5, "seq_len": 48, "vocab_size": 64, "neighbours": 3, "noise_prob": 0.5},
        "selective_copy": {"num_tokens": 10, "seq_len": 40, "vocab_size": 6},
        "induction": {"num_triggers": 3, "seq_len": 40, "vocab_size": 12},
        "digits": {"subset": "train", "visible_rows": 4},
    }
    for name, coords in expect.items():
        task, opts = _make(registry, name)
        assert task.coords(opts) == coords
        assert task.vocab_size(opts) == (18 if name == "digits" else opts.vocab_size)


# Digits -----------------------------------------------------------------------------------


def test_digits_examples_are_bos_plus_pixels_from_disjoint_splits(registry):
    task = registry.get_task("digits")
    train = task.generate(task.make_options({}), 3000, 0)
    held = task.generate(task.make_options({"subset": "heldout"}), 359, 0)
    assert (train.inputs[:, 0] == 17).all() and torch.equal(train.inputs[:, 1:], train.targets[:, :-1])
    assert (train.targets != IGNORE).all() and train.targets.max() <= 16
    first = {tuple(r) for r in train.targets[:1438].tolist()}
    assert len(first) == 1438  # the first pass is a permutation of the 1438 training digits
    assert first == {tuple(r) for r in train.targets[1438:2876].tolist()}  # then it cycles
    assert not first & {tuple(r) for r in held.targets.tolist()}
    assert len({tuple(r) for r in held.targets.tolist()}) == 359


def _tiny_softmax(registry) -> Backbone:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=18, context=64, d_model=32, n_layer=2, n_head=2)
    return Backbone(config, registry.get("softmax").build_mixer)


ROWS = [
    "completion_accuracy",
    "reference_accuracy",
    "occluded_accuracy",
    "mean_fill_accuracy",
    "completion_ms_per_image",
]


def test_digits_evaluate_untrained_softmax(registry):
    task = registry.get_task("digits")
    model = _tiny_softmax(registry).train()
    rows = task.evaluate(model, task.make_options({"eval_images": 150}), "cpu", 0)
    assert [r.name for r in rows] == ROWS and model.training  # train mode restored
    got = {r.name: r.value for r in rows}
    assert got["reference_accuracy"] > 0.9
    assert got["completion_accuracy"] < 0.5  # untrained greedy completion: near the blank floor
    assert 0.0 <= got["occluded_accuracy"] < 0.5 < got["mean_fill_accuracy"] < got["reference_accuracy"]
    assert got["completion_ms_per_image"] > 0 and rows[-1].unit == "ms"
    assert all(r.tags["images"] == 150 and r.tags["decode"] == "greedy" for r in rows)
    sampled = task.make_options({"eval_images": 60, "temperature": 1.0})
    a, b = (task.evaluate(model, sampled, "cpu", 5)[0] for _ in range(2))
    assert a.value == b.value and a.tags["decode"] == "sampled(T=1.0)"


@dataclass(frozen=True)
class _OracleState:
    pos: int
    images: torch.Tensor  # (B, 64) the true images of the batch rows


class _Oracle(LanguageModel):
    """Knows every digit: at each position its logits put all mass on the true next pixel."""

    def __init__(self, wrong: bool = False) -> None:
        super().__init__()
        from sklearn.datasets import load_digits

        self.config = ModelConfig(vocab_size=18, context=64)
        images, _ = load_digits(return_X_y=True)
        self.all = torch.from_numpy(np.asarray(images)).long()  # (1797, 64)
        self.wrong = wrong

    def init_state(self, batch_size, max_len, device=None, dtype=None):
        return _OracleState(0, torch.empty(0, 64, dtype=torch.long))

    def step(self, idx, state):
        if state.pos == 0:  # the prompt: [BOS, visible pixels] identifies each image
            vis = idx.size(1) - 1
            match = (self.all[None, :, :vis] == idx[:, None, 1:]).all(dim=2)  # (B, 1797)
            state = _OracleState(0, self.all[match.float().argmax(dim=1)])
        pos = torch.arange(state.pos, state.pos + idx.size(1))  # positions fed; predict pixel pos
        nxt = state.images[:, pos]  # (B, t)
        if self.wrong:
            nxt = 16 - nxt
        logits = torch.nn.functional.one_hot(nxt, 18).float()  # (B, t, 18)
        return logits, _OracleState(state.pos + idx.size(1), state.images)


def test_digits_oracle_completion_matches_reference(registry):
    task = registry.get_task("digits")
    opts = task.make_options({})
    got = {r.name: r.value for r in task.evaluate(_Oracle(), opts, "cpu", 0)}
    assert got["completion_accuracy"] == pytest.approx(got["reference_accuracy"]) and got["reference_accuracy"] > 0.9
    bad = {r.name: r.value for r in task.evaluate(_Oracle(wrong=True), opts, "cpu", 0)}
    assert bad["completion_accuracy"] < 0.5  # a wrong lower half is scored as wrong


def test_digits_needs_incremental_decoding(registry):
    class NoDecode(LanguageModel):
        config = ModelConfig(vocab_size=18, context=64)

    task = registry.get_task("digits")
    with pytest.raises(AttnbenchError, match="needs incremental decoding"):
        task.evaluate(NoDecode(), task.make_options({"eval_images": 4}), "cpu", 0)


def test_options_are_frozen_dataclasses(registry):
    for name in (*SYNTHETIC, "digits"):
        opts = registry.get_task(name).make_options({})
        assert dataclasses.is_dataclass(opts)
        with pytest.raises(dataclasses.FrozenInstanceError):
            opts.seq_len = 3  # type: ignore[misc]
