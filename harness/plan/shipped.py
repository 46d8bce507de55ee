"""The suites shipped inside the package (``attnbench.suites``: the repository's ``suites/``).

A suite argument that is an existing file is that file; otherwise a bare name (``quick`` or
``quick.yaml``) is the shipped suite of that name, so ``attnbench run quick`` works from an
installed wheel in any folder. Paths inside a shipped suite resolve against its file, as
for any suite, so its lm-eval tasks and data files are found beside it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from attnbench.errors import SuiteError, shortened

PACKAGE = "attnbench.suites"
SUFFIXES = (".yaml", ".yml")
# A header line `# Wall time (where, when): M:SS` (or H:MM:SS) records a measured run;
# `over H:MM:SS` a measured lower bound (a suite too long to run whole: its header gives the
# --experiments subsets and their times); `GPU` a suite meant for a GPU, not timed on a CPU.
_WALL_TIME = re.compile(
    r"^#\s*wall time\s*(?:\((?P<note>[^)]*)\))?\s*:\s*"
    r"(?:(?P<over>over\s+)?(?P<time>\d+(?::[0-5]\d){1,2})|(?P<gpu>GPU))\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SuiteSummary:
    """One suite file as `attnbench suites` lists it."""

    name: str  # what `attnbench run NAME` takes: the file name without .yaml
    path: Path
    description: str  # the suite's `description:`, else its header's first line
    wall_time_s: int | None  # from a `# Wall time (...): M:SS` header line; None: not measured
    wall_time_note: str  # the parenthesis of that line (machine, date), "" when none
    wall_time_over: bool = False  # the time is a lower bound (`over H:MM:SS`)
    gpu: bool = False  # a GPU suite (`device: cuda`, or `Wall time: GPU`): not timed on a CPU


def shipped_dir() -> Path:
    """The folder of the shipped suites, on disk (a wheel installs it as package data)."""
    try:
        root = resources.files(PACKAGE)
    except ModuleNotFoundError:
        raise SuiteError(
            f"the shipped suites (package {PACKAGE}) are not installed with this attnbench; "
            "reinstall it (in a checkout: pip install -e .) or pass a suite file's path"
        ) from None
    path = Path(str(root))
    # A strict editable install links each file from the checkout: name the checkout's folder, the one to edit.
    if (path / "__init__.py").is_symlink():
        path = (path / "__init__.py").resolve().parent
    if not path.is_dir():
        raise SuiteError(
            f"the shipped suites ({root}) are not a folder on disk (a zipped install?); install "
            "attnbench from its wheel or source, or pass a suite file's path"
        )
    return path


def shipped_names() -> list[str]:
    """Names of the shipped suites, sorted."""
    return sorted(p.stem for p in shipped_dir().iterdir() if p.suffix in SUFFIXES and p.is_file())


def _shipped_file(name: str) -> Path | None:
    folder = shipped_dir()
    for suffix in SUFFIXES:
        if (path := folder / f"{name}{suffix}").is_file():
            return path
    return None


def exists(path: Path, kind: str = "file") -> bool:
    """Whether ``path`` is a file (or, with kind "dir", a folder); a name the file system cannot
    look up (too long, say) is simply not there."""
    try:
        return path.is_file() if kind == "file" else path.is_dir()
    except OSError:
        return False


def resolve_suite(arg: str | Path) -> Path:
    """The suite file ``arg`` means: an existing path as given, else the shipped suite that a
    bare name (``quick``, ``quick.yaml``) names. Raises SuiteError listing the shipped names."""
    text = shortened(str(arg))  # as messages quote it
    if not str(arg).strip():
        raise SuiteError(
            "no suite given: pass a suite YAML file's path or a shipped suite's name (attnbench suites lists them)"
        )
    path = Path(str(arg)).expanduser()
    if exists(path):
        return path
    bare = path.name == str(arg) and not text.startswith(".")  # no folder in it
    stem = next((text[: -len(s)] for s in SUFFIXES if text.endswith(s)), text)
    if bare and (found := _shipped_file(stem)) is not None:
        return found
    if exists(path, "dir"):
        raise SuiteError(
            f"{text} is a folder; pass a suite YAML file in it or a shipped suite's name (attnbench suites lists them)"
        )
    try:
        names = shipped_names()
    except SuiteError:
        names = []
    shipped = ", ".join(names) or "(none installed)"
    if not bare:
        raise SuiteError(
            f"suite file {text} not found (looked at {shortened(str(path.absolute()))}); give an existing suite "
            f"YAML file, or a shipped suite's name without a folder: {shipped}"
        )
    close = difflib.get_close_matches(stem, names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise SuiteError(
        f"suite file {text} not found in {Path.cwd()}, and no shipped suite is named {stem!r}; "
        f"{hint}give a suite YAML file's path or a shipped suite's name: {shipped}"
    )


def _header(text: str) -> list[str]:
    """The comment lines that open a suite file."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def describe(path: Path) -> SuiteSummary:
    """Name, description and measured wall time of one suite file (read, not validated)."""
    text = path.read_text(encoding="utf-8")
    header = _header(text)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    description = data.get("description", "") if isinstance(data, dict) else ""
    if not description:
        first = next((h.lstrip("#").strip() for h in header if h.lstrip("#").strip()), "")
        description = first
    wall, note, over = None, "", False
    gpu = isinstance(data, dict) and str(data.get("device", "")).startswith("cuda")
    for line in header:
        if (m := _WALL_TIME.match(line.strip())) is not None:
            note, over, gpu = (m["note"] or "").strip(), bool(m["over"]), gpu or bool(m["gpu"])
            if m["time"]:
                parts = [int(p) for p in m["time"].split(":")]
                wall = sum(p * 60**i for i, p in enumerate(reversed(parts)))
            break
    return SuiteSummary(
        name=path.stem,
        path=path,
        description=str(description),
        wall_time_s=wall,
        wall_time_note=note,
        wall_time_over=over,
        gpu=gpu and wall is None,
    )


def list_suites(folder: Path | None = None) -> list[SuiteSummary]:
    """Every suite file in ``folder`` (default: the shipped suites), by name."""
    folder = shipped_dir() if folder is None else folder
    if not folder.is_dir():
        raise SuiteError(
            f"{folder} is not a folder; give a folder of suite YAML files, or nothing for the shipped ones"
        )
    out = []
    for path in sorted(folder.iterdir(), key=lambda p: (p.stem, p.suffix)):
        if path.suffix in SUFFIXES and path.is_file():
            try:
                out.append(describe(path))
            except (OSError, UnicodeDecodeError) as exc:
                raise SuiteError(f"{path}: cannot read this suite file ({exc}); fix or remove it") from None
    return out


def format_wall_time(seconds: int | None, over: bool = False, gpu: bool = False) -> str:
    """``M:SS`` or ``H:MM:SS`` ("over H:MM:SS" for a lower bound); "GPU" for an untimed GPU
    suite; "not measured" for None."""
    if seconds is None:
        return "GPU" if gpu else "not measured"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
    return f"over {text}" if over else text
