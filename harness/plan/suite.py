"""Suites: versioned, declarative YAML validated before anything runs.

A suite file::

    version: 1
    name: quick
    include: [common.yaml]          # mappings merged under this file; experiments appended
    defaults: {model: {...}, data: {...}, train: {...}}
    experiments:
      - name: tiny
        kind: train
        variants: [softmax, toy]     # or "all"
        models: [{d_model: 64, n_layer: 2, n_head: 2}]
        train: {budget: {steps: 200}, lr: 1e-3}
        grid: {lr: [1e-3, 3e-3]}     # every point runs
        seeds: [0, 1]

Every error names the file, the line, the key and what to do.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from attnbench.errors import SuiteError, quoted, shortened
from attnbench.plan import overrides as ov_
from attnbench.plan.defaults import COPIED, Defaults
from attnbench.plan.shipped import resolve_suite
from attnbench.plan.specs import AnyExperiment
from attnbench.plan.suite_files import Source, deep_merge, load_tree

# Experiment kinds, read off the experiment models of the suite schema (specs.AnyExperiment).
KINDS = tuple(get_args(m.model_fields["kind"].annotation)[0] for m in get_args(get_args(AnyExperiment)[0]))

SUITE_VERSION = 1


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    version: Literal[1]
    """Suite format version; this attnbench reads 1."""
    name: str = Field(min_length=1)
    """The suite's name: results in the store and the report's folder are filed under it. Default: the file's name
    without .yaml."""
    description: str = ""
    """One line saying what the suite measures, shown under the report's title."""
    include: list[str] = []
    """Other suite files, relative to this one: their mappings are merged under this file's, their experiments come
    first (one of this file's with the same name replaces it)."""
    allow_failed_checks: bool = False
    """Record the numbers of variants that failed the trust gate (marked as failing) instead of refusing to run them."""
    check_time_limit_s: float = Field(default=300.0, gt=0, allow_inf_nan=False)
    """Wall-clock seconds the trust gate's checks may take per variant; a check still running then has
    failed (a hang)."""
    device: str = "auto"
    """Where cells run: cpu, cuda, cuda:1 ... or auto (CUDA when available); `attnbench run --device` overrides it."""
    retries: int = Field(default=0, ge=0, le=10)
    """Times a cell runs again after the worker process running it died (killed, out of memory, a crash outside
    Python), in the local pool (`--jobs N`) and under `--executor ray` alike."""
    cpus_per_cell: int = Field(default=1, ge=1)
    """CPUs each cell's Ray task reserves (`--executor ray`)."""
    track: list[str] = []
    """Experiment trackers every cell is mirrored to (tensorboard, wandb, mlflow, or a plugin's); `attnbench run
    --track` adds to them."""

    retry_failed: bool = True
    """A re-run trains again the cells whose stored attempt failed (a crash is no result; a diverged run is one);
    `attnbench run --no-retry-failed` overrides it."""
    defaults: Defaults = Defaults()
    """Settings merged under every experiment (model, data, train) or copied into those that do not set them (see
    defaults)."""
    experiments: list[AnyExperiment] = Field(min_length=1)
    """The experiments, in the order they run; each `kind` adds its own mapping (train, speed, scaling, lm_eval,
    finetune)."""

    # Set by load_suite, not by the YAML.
    _path: Path | None = PrivateAttr(None)
    _locate: Any = PrivateAttr(None)
    _overrides: tuple[str, ...] = PrivateAttr(())

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def overrides(self) -> tuple[str, ...]:
        """The `--set KEY=VALUE` overrides applied on loading, as given."""
        return self._overrides

    @model_validator(mode="after")
    def _unique_names(self) -> Suite:
        names = [e.name for e in self.experiments]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"experiment names must be unique; repeated: {dupes}")
        return self


# -- loading --------------------------------------------------------------------------


def _fields_of_kind(kind: Any) -> set[str]:
    """The top-level settings an experiment of ``kind`` accepts (every key for an unknown
    kind, so validation names the kind rather than a default it never took)."""
    for model in get_args(get_args(AnyExperiment)[0]):
        if kind in get_args(model.model_fields["kind"].annotation):
            return set(model.model_fields)
    return {"data", "train", "variants", "seeds", "variant_options", "grid"}


def _apply_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        return raw
    out = dict(raw)
    exps = []
    for exp in raw.get("experiments", []):
        if not isinstance(exp, dict):
            exps.append(exp)
            continue
        e = dict(exp)
        takes = _fields_of_kind(e.get("kind"))  # a default applies only where the kind has the setting
        for key in ("data", "train"):
            if isinstance(defaults.get(key), dict) and key in takes:
                e[key] = deep_merge(defaults[key], e.get(key) or {})
        if isinstance(defaults.get("model"), dict):
            models = e.get("models") or [{}]
            if isinstance(models, list):
                e["models"] = [deep_merge(defaults["model"], m) if isinstance(m, dict) else m for m in models]
        for key in COPIED:
            if key in defaults and key not in e and key in takes:
                e[key] = copy.deepcopy(defaults[key])
        exps.append(e)
    out["experiments"] = exps
    return out


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{shortened(str(part))}" if out else shortened(str(part)))
    return out


# An experiment's keys that are plural, written singular: where the setting goes instead.
_PLURAL_KEYS = {
    "model": "an experiment lists its model sizes under models: (a list, e.g. models: [{d_model: 64, "
    "n_layer: 2, n_head: 2}]); model: (one mapping) belongs under defaults:, where it fills every experiment's models",
    "variant": "an experiment lists its variants under variants: (e.g. variants: [softmax, linear])",
    "seed": "an experiment lists its seeds under seeds: (e.g. seeds: [0, 1, 2])",
}


def _fix_hint(err: dict[str, Any]) -> str:
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "missing":
        return f"add the key {loc[-1]!r}"
    if kind == "extra_forbidden":
        if len(loc) == 3 and loc[0] == "experiments" and loc[2] in _PLURAL_KEYS:
            return _PLURAL_KEYS[loc[2]]
        return "remove it or correct its spelling"
    if kind.startswith("greater_than") or kind.startswith("less_than"):
        return "use a value in range"
    return "correct the value"


def _normalise(err: Mapping[str, Any]) -> dict[str, Any]:
    """Drop the union tag pydantic puts in experiment locations; name a missing kind."""
    loc = tuple(err["loc"])
    if len(loc) >= 3 and loc[0] == "experiments" and isinstance(loc[1], int) and loc[2] in KINDS:
        loc = loc[:2] + loc[3:]
    if err["type"] == "union_tag_not_found":
        return {**err, "loc": (*loc, "kind"), "type": "missing", "msg": "Field required"}
    if err["type"] == "union_tag_invalid":
        return {**err, "loc": (*loc, "kind"), "msg": f"unknown experiment kind; use one of {list(KINDS)}"}
    return {**err, "loc": loc}


def _suite_error(exc: ValidationError, sources_by_loc) -> SuiteError:
    lines = []
    for err in map(_normalise, exc.errors()):
        loc = tuple(err["loc"])
        src, line = sources_by_loc(loc)
        where = f"{src.path}:{line}" if line else str(src.path)
        msg = err["msg"].removeprefix("Value error, ")
        got = ""
        if err["type"] not in ("missing", "model_type", "union_tag_invalid") and not isinstance(err.get("input"), dict):
            got = f" (got {quoted(err.get('input'))})"
        lines.append(f"{where}: {_format_loc(loc) or '(top level)'}: {msg}{got}; {_fix_hint(err)}")
    return SuiteError("invalid suite:\n  " + "\n  ".join(lines))


def load_suite(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Suite:
    """Parse, merge includes, apply `--set` overrides and defaults, and validate a suite file
    (a path, or a shipped suite's name: ``quick``)."""
    path = resolve_suite(path)
    raw, origins, sources = load_tree(path, ())
    main = sources[0]
    sets = [ov_.parse_override(text) for text in overrides]
    raw = ov_.apply_overrides(raw, sets)
    raw.setdefault("name", path.stem)
    raw = ov_.force_defaults(_apply_defaults(raw), sets)

    def locate(loc: tuple[Any, ...]) -> tuple[Source | ov_.CommandLine, int | None]:
        """File and line for an error at ``loc`` of the merged suite (or the override)."""
        ov = ov_.matching(sets, raw, loc)
        if ov is not None:
            return ov_.CommandLine(ov), None
        if len(loc) >= 2 and loc[0] == "experiments" and isinstance(loc[1], int) and loc[1] < len(origins):
            src, i = origins[loc[1]]
            line, found = src.find(("experiments", i, *loc[2:]))
            if found or len(loc) < 4:
                return src, line
            # The value may have been merged in from `defaults` (model/data/train).
            rest = ("model", *loc[4:]) if loc[2] == "models" else loc[2:]
            for s in sources:
                d_line, d_found = s.find(("defaults", *rest))
                if d_found:
                    return s, d_line
            return src, line
        for s in sources:
            if loc and loc[0] in s.data:
                return s, s.line(loc)
        return main, main.line(loc)

    if "version" in raw and raw["version"] != SUITE_VERSION:
        raise SuiteError(
            f"{main.path}:{main.line(('version',))}: suite format version {quoted(raw['version'])} "
            f"is not supported; this attnbench reads version {SUITE_VERSION}"
        )
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as exc:
        raise _suite_error(exc, locate) from None
    suite._path = path.resolve()
    suite._locate = locate  # for errors found against the registry (plan/validation.py)
    suite._overrides = tuple(overrides)
    return suite


def with_compile(suite: Suite) -> Suite:
    """The suite with ``compile: true`` on every experiment whose settings have it (the CLI's
    ``--compile``); part of each cell's config, so compiled cells get keys of their own."""
    experiments = []
    for exp in suite.experiments:
        spec = exp.spec()
        if "compile" in type(spec).model_fields:
            exp = exp.model_copy(update={exp.kind: spec.model_copy(update={"compile": True})})
        experiments.append(exp)
    out = suite.model_copy(update={"experiments": experiments})
    out._path, out._locate = suite._path, suite._locate
    return out


def with_only_experiments(suite: Suite, names: list[str]) -> Suite:
    """The suite with only the named experiments (the CLI's ``--experiments``); a cell's key
    does not depend on the experiments beside it, so the cells run are the ones a full run has."""
    known = [exp.name for exp in suite.experiments]
    unknown = [n for n in names if n not in known]
    if unknown:
        where = suite._path or suite.name
        raise SuiteError(f"--experiments: {', '.join(unknown)} not in {where}; its experiments are {', '.join(known)}")
    out = suite.model_copy(update={"experiments": [exp for exp in suite.experiments if exp.name in names]})
    out._path, out._locate = suite._path, suite._locate
    return out


def problem_at(suite: Suite, loc: tuple[Any, ...], message: str) -> str:
    """``message`` after the file, line and key of ``loc`` in ``suite`` (after loading)."""
    locate = suite._locate
    if locate is None:
        return f"{_format_loc(loc)}: {message}"
    src, line = locate(loc)
    where = src.path if line is None else f"{src.path}:{line}"  # a --set override has no line
    return f"{where}: {_format_loc(loc)}: {message}"


def suite_error_at(suite: Suite, loc: tuple[Any, ...], message: str) -> SuiteError:
    """A SuiteError naming file and line of ``loc`` in ``suite`` (after loading)."""
    return SuiteError(problem_at(suite, loc, message))


def suite_problems(problems: list[str]) -> SuiteError:
    """One SuiteError for every problem found (lines from ``problem_at``), each on its own line."""
    if len(problems) == 1:
        return SuiteError(problems[0])
    return SuiteError(f"invalid suite ({len(problems)} problems):\n  " + "\n  ".join(problems))
