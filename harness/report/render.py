"""A ``Report`` rendered by Jinja2 templates (``templates/``): one self-contained HTML page
(inline CSS, figures as base64 PNG or inline SVG, no script, no external URL; a
Content-Security-Policy that forbids fetching anything) and Markdown (figures as PNG files
beside it). Every name and value from plugins or the store is escaped by the environment, not
by hand: HTML autoescape in the page; Markdown and HTML escaping (``md_escape``) of every
printed value in the Markdown, unless a template marks it ``verbatim`` (a path this writer
made, or Markdown built here from escaped parts)."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable

import pandas as pd
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from attnbench.report.document import Problem, Report, Table
from attnbench.report.values import MISSING

SEE_PROBLEMS = "see Problems"  # headline.SEE_PROBLEMS: linked to the Problems list
ALL_CLEAR = "None: every run finished, every speed point was measured and every trust-gate check passed."
_BAD = re.compile(r"^(FAIL|ERROR|oom|timeout|timed out|out of memory|diverged|failed|error)\b")
_DECISION = re.compile(r"\b(better|worse|undetermined|equivalent(?: within)? ±[0-9.e+-]*[0-9])(?=$|[\s);,/])")
_FAILED = re.compile(r"\b(failed|diverged)(?=: no seed finished)")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|])")


class Verbatim(str):
    """Markdown text printed as it is: already escaped, or a path this writer made."""


def cell_text(value: object) -> str:
    """A table cell as text; missing values (None, NaN) as a dash."""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    return str(value)


def md_escape(value: object) -> str:
    """Text safe in a Markdown table cell: HTML-escaped, Markdown syntax and pipes escaped,
    on one line."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MD_SPECIAL.sub(r"\\\1", text)


def sentence_html(text: str) -> Markup:
    """A headline sentence: the variant before its first colon in bold, each decision in bold
    and coloured by its outcome, an experiment none of whose seeds finished in red, linked to
    the Problems list."""
    variant, sep, rest = text.partition(": ")
    if not sep:
        return escape(text)
    body = _DECISION.sub(lambda m: f'<b class="{m.group(1).split()[0]}">{m.group(1)}</b>', str(escape(rest)))
    body = _FAILED.sub(lambda m: f'<b class="failed">{m.group(1)}</b>', body)
    body = body.replace(SEE_PROBLEMS, f'<a href="#problems">{SEE_PROBLEMS}</a>')
    return Markup("<b>{}</b>{}").format(variant, sep) + Markup(body)


def _md_sentence(text: str) -> Verbatim:
    """A headline sentence in Markdown, its 'see Problems' linked to the Problems list."""
    return Verbatim(md_escape(text).replace(SEE_PROBLEMS, "see [Problems](#problems)"))


def _anchor(title: str) -> str:
    return "s-" + (re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section")


def _problem_text(p: Problem) -> str:
    if p.detail.lower().startswith(p.what.lower()):  # the detail already says what happened
        return f"{p.kind}: {p.variant} — {p.where}: {p.detail}"
    detail = f": {p.detail}" if p.detail else ""
    return f"{p.kind}: {p.variant} — {p.where}: {p.what}{detail}"


def _grouped(problems: list[Problem]) -> list[tuple[str, str, list[Problem]]]:
    """Problems by (kind, what), in order of first appearance: one line per kind of problem."""
    groups: dict[tuple[str, str], list[Problem]] = {}
    for p in problems:
        groups.setdefault((p.kind, p.what), []).append(p)
    return [(kind, what, ps) for (kind, what), ps in groups.items()]


def _kinds_counted(problems: list[Problem]) -> str:
    """'2 run, 1 trust gate': how many problems of each kind, in order of first appearance."""
    kinds: dict[str, int] = {}
    for p in problems:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in kinds.items())


def _cells(view: pd.DataFrame) -> list[list[str]]:
    return [[cell_text(v) for v in row] for row in view.itertuples(index=False)]


def _environment(autoescape: bool, finalize: Callable[[object], object] | None = None) -> Environment:
    env = Environment(
        loader=PackageLoader("attnbench.report", "templates"),
        autoescape=autoescape,
        finalize=finalize,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(anchor=_anchor, problem_text=_problem_text, grouped=_grouped, cells=_cells)
    env.filters.update(kinds_counted=_kinds_counted, verbatim=Verbatim)
    env.filters["b64"] = lambda data: base64.b64encode(data).decode("ascii")
    env.tests["bad"] = lambda text: _BAD.match(text) is not None
    env.globals.update(all_clear=ALL_CLEAR)
    return env


_HTML = _environment(autoescape=True)
_HTML.filters["sentence"] = sentence_html
_HTML.filters["svg"] = Markup  # drawn by our own figure code (matplotlib escapes the text in it)
_MARKDOWN = _environment(autoescape=False, finalize=lambda v: v if isinstance(v, Verbatim) else md_escape(v))
_MARKDOWN.filters["sentence"] = _md_sentence


def to_html(report: Report, links: Callable[[Table], dict[str, str]]) -> str:
    """The page; ``links(table)`` gives {label: relative path} of a table's data files."""
    return _HTML.get_template("report.html.j2").render(report=report, links=links)


def to_markdown(report: Report, figure_path: Callable[[str], str], links: Callable[[Table], dict[str, str]]) -> str:
    """The Markdown; ``figure_path(slug)`` is a figure's relative PNG path."""
    text = _MARKDOWN.get_template("report.md.j2").render(report=report, figure_path=figure_path, links=links)
    return text.rstrip() + "\n"
