"""The suite reference (Markdown) and the JSON Schema of suite files, generated from the
pydantic models of plan/base.py, plan/specs.py, plan/speed_spec.py, plan/scaling_spec.py and
plan/suite.py (`attnbench docs` writes both). Each field's meaning is its docstring in the
model (``use_attribute_docstrings``): one source for the schema's descriptions and the
reference's last column."""

from __future__ import annotations

import inspect
import json
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from attnbench.data.spec import DataSpec
from attnbench.plan import base, defaults, downstream_spec, protocol, scaling_spec, specs, speed_spec
from attnbench.plan.grid_window import GridWindow
from attnbench.plan.suite import Suite

SCHEMA_FILE = "suite.schema.json"
REFERENCE_FILE = "suite-reference.md"
# Keys of `defaults:` and where each lands in every experiment (plan/suite._apply_defaults).
DEFAULTS_KEYS = defaults.MERGED
DEFAULTS_COPIED = defaults.COPIED

# (heading, model, the YAML key it sits under, a short example)
SECTIONS: list[tuple[str, type[BaseModel], str, str]] = [
    ("Suite (top level)", Suite, "", "version: 1\nname: mine\nexperiments: [...]"),
    (
        "Every experiment",
        base.ExperimentBase,
        "experiments[]",
        "- name: text\n  kind: train\n  variants: [softmax, linear]\n  seeds: [0, 1]\n"
        "  variant_options: {linear: {feature_map: elu}}",
    ),
    ("Model size", base.ModelSpec, "models[] / defaults.model", "models: [{d_model: 128, n_layer: 4, n_head: 4}]"),
    (
        "Hybrid layers",
        base.LayerPattern,
        "models[].layers",
        "layers: {pattern: [gated_deltanet, gated_deltanet, gated_deltanet, softmax]}   # repeated to n_layer\n"
        "layers: [softmax, gla, {variant: gla, options: {chunk_size: 8}}]            # one entry per layer",
    ),
    (
        "Hybrid layer entry",
        base.LayerEntry,
        "models[].layers[] / layers.pattern[]",
        "{variant: gla, options: {chunk_size: 8}}   # or just the variant's name",
    ),
    (
        "Data",
        DataSpec,
        "data / defaults.data",
        "data: {source: builtin}                # Tiny Shakespeare, shipped\n"
        "data: {source: text, path: corpus.txt, tokenizer: bpe, bpe_vocab_size: 8192}\n"
        "data: {source: task, task: mqar, task_options: {num_kv_pairs: 4}}",
    ),
    ("Budget", base.Budget, "train.budget", "budget: {steps: 2000}   # or tokens / seconds / flops"),
    ("Training (kind: train)", specs.TrainExperiment, "experiments[]", "kind: train\ngrid: {lr: [1.0e-3, 3.0e-3]}"),
    (
        "Training settings",
        base.TrainSpec,
        "train / defaults.train",
        "train: {budget: {steps: 500}, batch_size: 8, seq_len: 128, lr: 3.0e-3}",
    ),
    (
        "Protocol (train experiments)",
        protocol.Protocol,
        "protocol",
        "protocol: {baseline: softmax, metric: loss, margin: 0.05,\n"
        "           tuning: {seeds: [0], budget: {steps: 200}, eta: 2}}\n"
        "protocol: {baselines: [softmax, linear]}   # a Δ column, interval and decision against each\n"
        "protocol: {seeds: {min: 3, max: 10}, learn_target: 0.95}   # seeds until decided; time to 0.95 accuracy",
    ),
    (
        "Tuning by successive halving",
        protocol.Tuning,
        "protocol.tuning",
        "tuning: {seeds: [0], budget: {steps: 200}, eta: 2}\n"
        "tuning: {seeds: [0], budget: {steps: 800}, eta: 2, criterion: accuracy}   # a task's answers decide",
    ),
    (
        "Learning-rate search windows",
        GridWindow,
        "grid.<float setting>",
        "grid: {lr: {start: [1.0e-3, 3.0e-3], factor: 3, bounds: [1.0e-4, 3.0e-2]}}\n"
        "# a rung whose best point lies on an edge of the values tried trains the next value beyond it\n"
        "# (same seeds and budget) until the best is inside, or the next would pass a bound",
    ),
    (
        "Seeds until decided",
        protocol.SeedRounds,
        "protocol.seeds",
        "seeds: {min: 3, max: 10}                      # O'Brien-Fleming-type spending\n"
        "seeds: {min: 3, max: 10, spending: pocock}     # spends more of the error early",
    ),
    (
        "Published expectations",
        protocol.Expectation,
        "protocol.expectations[]",
        "- claim: a sliding window cannot recall a pair outside it\n  source: Based (Arora et al. 2024)\n"
        "  variant: windowed\n  outcome: worse\n  setting: {n_pairs: 7, n_queries: 1}",
    ),
    ("Speed (kind: speed)", speed_spec.SpeedExperiment, "experiments[]", "kind: speed"),
    ("Speed settings", speed_spec.SpeedSpec, "speed", "speed: {T_min: 128, T_max: 1024, modes: [forward, decode]}"),
    ("Scaling (kind: scaling)", scaling_spec.ScalingExperiment, "experiments[]", "kind: scaling"),
    ("Scaling settings", scaling_spec.ScalingSpec, "scaling", "scaling: {tokens_per_param: 4, seq_len: 128}"),
    ("lm-eval (kind: lm_eval)", downstream_spec.LmEvalExperiment, "experiments[]", "kind: lm_eval"),
    (
        "lm-eval settings",
        downstream_spec.LmEvalSpec,
        "lm_eval",
        "lm_eval: {from_experiment: text, tasks: [attnbench_recall], include_path: lm_eval_tasks}",
    ),
    ("Fine-tuning (kind: finetune)", downstream_spec.FinetuneExperiment, "experiments[]", "kind: finetune"),
    (
        "Fine-tuning settings",
        downstream_spec.FinetuneSpec,
        "finetune",
        "finetune: {from_experiment: text, method: lora, ranks: [1, 4, 16], target: mixer,\n"
        "           budget: {steps: 300}, batch_size: 16, seq_len: 64, lr: 1.0e-3}",
    ),
]

WHERE_FILES_GO = """\
## Where files are written

- **Results store**: `results/attnbench.sqlite` (`--store PATH` picks another file).
- **Reports**: `reports/<suite>/` beside the store (`results/reports/<suite>/index.html`
  for the default store); `attnbench report --out DIR` writes elsewhere.
- **Checkpoints**: `checkpoints/` beside the store (final models of `train` cells with
  `checkpoint: true`, and resumable training states every `checkpoint_interval` steps).
  `attnbench checkpoints [--suite S] [--variant V] [--chosen]` says which `<cell key>.pt` is
  which run; `attnbench export --best VARIANT --experiment E OUT` exports the chosen one.
- **Tokenizers**: a `bpe` tokenizer is trained locally on the training text; a `pretrained`
  one is read from `tokenizer_name`, which is a hub name or a `tokenizer.json` / folder
  relative to the suite file.
- **Paths in a suite** (`data.path`, `data.val_path`, `data.tokenizer_name` when it names a
  file, `include`, lm-eval `include_path` and `paths`) are relative to the suite file.
"""


def meaning(text: str | None) -> str:
    """A field's description (its docstring in the model) on one line: what the reference's
    last column and the schema's ``description`` both show."""
    return " ".join((text or "").split())


def type_name(ann: Any) -> str:
    origin, args = get_origin(ann), get_args(ann)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    if ann is type(None):
        return "null"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return f"mapping ({ann.__name__})"
    return getattr(ann, "__name__", str(ann)).replace("typing.", "")


def _constraints(field: Any) -> str:
    ops = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "min_length": "length >="}
    out = []
    for meta in field.metadata:
        for attr, sym in ops.items():
            if getattr(meta, attr, None) is not None:
                out.append(f"{sym} {getattr(meta, attr)}")
    return ", ".join(out)


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default is PydanticUndefined else field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_defaults=True) or "(its defaults)"
    if isinstance(value, list):
        value = [v.model_dump(exclude_defaults=True) if isinstance(v, BaseModel) else v for v in value]
    return f"`{json.dumps(value, default=str)}`"


def _table(model: type[BaseModel], only_own: bool) -> list[str]:
    base_fields = base.ExperimentBase.model_fields if only_own else {}
    rows = ["| key | type | default | constraint | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if name in base_fields:
            continue
        text = meaning(field.description).replace("|", "\\|")
        kind = type_name(field.annotation).replace("|", "\\|")
        rows.append(f"| `{name}` | {kind} | {_default(field)} | {_constraints(field)} | {text} |")
    return rows


def _doc(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    inherited = any(doc == inspect.getdoc(b) for b in model.__mro__[1:] if b is not object)
    return "" if inherited else " ".join(doc.split())


def reference_markdown() -> str:
    """The suite reference: every key with type, default, constraint, meaning, example."""
    out = [
        "# Suite reference",
        "",
        "Generated from the pydantic models by `attnbench docs`; do not edit by hand. The JSON",
        f"Schema for editors is [`{SCHEMA_FILE}`]({SCHEMA_FILE}) (add "
        f"`# yaml-language-server: $schema=../docs/{SCHEMA_FILE}` to a suite).",
        "",
        "## `defaults`",
        "",
        f"`defaults.model`, `defaults.data` and `defaults.train` are merged under each experiment's "
        f"own `models[]`, `data` and `train` (the experiment's keys win); "
        f"{', '.join(f'`defaults.{k}`' for k in DEFAULTS_COPIED)} are copied into experiments that "
        "do not set them. `attnbench run/validate SUITE --set KEY=VALUE` overrides any key "
        "(`--set defaults.train.lr=1e-3` also replaces experiments' own `train.lr`; "
        "`--set experiments.NAME.seeds=[0,1]` addresses one experiment by name).",
        "",
    ]
    for title, model, where, example in SECTIONS:
        only_own = model in (
            specs.TrainExperiment,
            speed_spec.SpeedExperiment,
            scaling_spec.ScalingExperiment,
            downstream_spec.LmEvalExperiment,
        )
        out += [f"## {title}", ""]
        if where:
            out += [f"Under `{where}`." + (" Adds to *Every experiment*:" if only_own else ""), ""]
        if _doc(model):
            out += [_doc(model), ""]
        out += [*_table(model, only_own), "", "```yaml", example, "```", ""]
    return "\n".join(out) + "\n" + WHERE_FILES_GO


def _relax(node: Any, keep: set[str]) -> Any:
    """Drop `required` lists except the keys in ``keep``: defaults and includes may supply
    the rest, so a suite file alone need not carry them."""
    if isinstance(node, dict):
        out = {k: _relax(v, keep) for k, v in node.items() if k != "required"}
        kept = [r for r in node.get("required", []) if r in keep]
        if kept:
            out["required"] = kept
        return out
    if isinstance(node, list):
        return [_relax(v, keep) for v in node]
    return node


def suite_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a suite *file*: the models' schema, with `defaults` typed and
    only `version`, `kind` and experiment `name` required (the rest may come from
    defaults or includes)."""
    schema = _relax(Suite.model_json_schema(), keep={"version", "kind", "name"})
    schema["required"] = ["version"]
    defs = schema.setdefault("$defs", {})
    for name in (defaults.Defaults.__name__, *(f"Partial{m.__name__}" for m in DEFAULTS_KEYS.values())):
        defs.pop(name, None)  # `defaults` is written out below, with the experiments' own definitions
    for model in DEFAULTS_KEYS.values():
        defs.setdefault(model.__name__, _relax(model.model_json_schema(ref_template="#/$defs/{model}"), keep=set()))
        defs[model.__name__].pop("$defs", None)
    common = base.ExperimentBase.model_json_schema()["properties"]
    said = {k: {"description": meaning(f.description)} for k, f in defaults.Defaults.model_fields.items()}
    schema["properties"]["defaults"] = {
        "type": "object",
        "additionalProperties": False,
        "description": meaning(Suite.model_fields["defaults"].description),
        "properties": {
            **{k: {"$ref": f"#/$defs/{m.__name__}", **said[k]} for k, m in DEFAULTS_KEYS.items()},
            **{k: {**_relax(common[k], set()), **said[k]} for k in DEFAULTS_COPIED if k in common},
            "grid": {"type": "object", "additionalProperties": {"type": "array"}, **said["grid"]},
            "battery": {"type": "string", "minLength": 1, **said["battery"]},
        },
    }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "attnbench suite"
    return _one_line(schema)


def _one_line(node: Any) -> Any:
    """Every ``description`` of the schema on one line, as the reference shows it."""
    if isinstance(node, dict):
        return {k: meaning(v) if k == "description" and isinstance(v, str) else _one_line(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_one_line(v) for v in node]
    return node


def write_docs(out_dir: Any) -> list[Any]:
    """Write the reference and the schema into ``out_dir``; returns the paths written."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ref, schema = out / REFERENCE_FILE, out / SCHEMA_FILE
    ref.write_text(reference_markdown(), encoding="utf-8")
    schema.write_text(json.dumps(suite_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return [ref, schema]
