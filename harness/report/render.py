"""A ``Report`` as one self-contained HTML page (inline CSS, figures as base64 PNG, no
script, no external URL; a Content-Security-Policy that forbids fetching anything) and as
Markdown (figures as PNG files beside it). Every name and value from plugins or the store
is escaped: HTML-escaped in the page, Markdown- and HTML-escaped in the Markdown."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable

import pandas as pd

from attnbench.report.document import Problem, Report, Section, Table
from attnbench.report.values import MISSING

_BAD = re.compile(r"^(FAIL|ERROR|oom|timeout|timed out|out of memory|diverged|failed|error)\b")
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1em auto; max-width: 1200px;
       padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 12.5px; display: block; overflow-x: auto; }
th, td { border: 1px solid #d0d0d0; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } tr:nth-child(even) td { background: #fafafa; }
td.bad, li.bad { color: #a40000; font-weight: 600; }
.problems { border: 2px solid #a40000; background: #fff4f4; padding: .4em 1em; }
.ok { border: 1px solid #2f7d32; background: #f3fbf3; padding: .4em 1em; }
.missing { color: #555; font-style: italic; } p.failed { color: #a40000; font-weight: 600; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption, .note { color: #444; font-size: 12.5px; }
dl.summary { display: flex; flex-wrap: wrap; gap: 0 .3em; margin: .2em 0; }
dl.summary dt { font-weight: 600; } dl.summary dt::after { content: ":"; } dl.summary dd { margin: 0 1em 0 0; }
nav ul { columns: 2; }
#s-answer h2 { margin-top: .5em; } #s-answer > p.note { margin: .3em 0 .5em; font-size: 11.5px; }
#answer { display: flex; gap: 1.2em; align-items: flex-start; }
#answer > h3, #answer > p.note { display: none; }
#answer table { flex: 1 1 58%; font-size: 12px; line-height: 1.3; }
#answer figure { flex: 0 0 38%; margin: 0; } #answer figcaption { font-size: 11px; }
#sentences { margin: .3em 0; padding-left: 1.1em; font-size: 12.5px; line-height: 1.35; }
#sentences li { margin: 0 0 .35em; } #sentences li > b:first-child { font-size: 13px; }
b.better { color: #1b6e20; } b.worse { color: #9a4d00; } b.equivalent { color: #1f4e99; }
b.undetermined { color: #666; } b.failed { color: #a40000; }
header h1 { margin: .2em 0; } header dl.summary { font-size: 12px; color: #333; }
header p.description { margin: .1em 0 .4em; font-size: 15px; color: #333; }
p.alarm { margin: .3em 0; } p.alarm a { color: #a40000; font-weight: 600; }
.problems h2, .ok h2, .notes h2 { margin-top: .3em; font-size: 1.1em; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _anchor(title: str) -> str:
    return "s-" + (re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section")


def cell_text(value: object) -> str:
    """A table cell as text; missing values (None, NaN) as a dash."""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    return str(value)


def _cell_class(text: str) -> str:
    return ' class="bad"' if _BAD.match(text) else ""


def html_table(table: Table, links: dict[str, str]) -> str:
    view = table.view
    head = "".join(f"<th>{_e(c)}</th>" for c in view.columns)
    body = "".join(
        "<tr>" + "".join(f"<td{_cell_class(t)}>{_e(t)}</td>" for t in map(cell_text, row)) + "</tr>"
        for row in view.itertuples(index=False)
    )
    files = " ".join(f'<a href="{_e(path)}">{_e(kind)}</a>' for kind, path in links.items())
    note = f'<p class="note">{_e(table.note)}</p>' if table.note else ""
    return f"<h3>{_e(table.title)}</h3>{note}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" + (
        f'<p class="note">Data: {files}</p>' if files else ""
    )


def _problem_text(p: Problem) -> str:
    if p.detail.lower().startswith(p.what.lower()):  # the detail already says what happened
        return f"{p.kind}: {p.variant} — {p.where}: {p.detail}"
    detail = f": {p.detail}" if p.detail else ""
    return f"{p.kind}: {p.variant} — {p.where}: {p.what}{detail}"


def _html_section(section: Section, links: Callable[[Table], dict[str, str]]) -> str:
    parts = [f'<section id="{_anchor(section.title)}"><h2>{_e(section.title)}</h2>']
    if section.missing:
        parts.append(f'<p class="missing">Missing: {_e(section.missing)}.</p>')
    if section.failed:
        parts.append(f'<p class="failed">Failed: {_e(section.failed)} (<a href="#problems">Problems</a>).</p>')
    if section.intro and not section.missing:
        parts.append(f"<p>{_e(section.intro)}</p>")
    parts += [f'<p class="note">{_e(n)}</p>' for n in section.notes]
    parts += [html_table(t, links(t)) for t in section.tables]
    parts += [_html_figure(f) for f in section.figures]
    return "".join(parts) + "</section>"


def _html_figure(f) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    caption = f"<figcaption><b>{_e(f.title)}.</b> {_e(f.caption)}</figcaption>"
    return f'<figure><img src="data:image/png;base64,{data}" alt="{_e(f.title)}">{caption}</figure>'


_DECISION = re.compile(r"\b(better|worse|undetermined|equivalent(?: within)? ±[0-9.e+-]*[0-9])(?=$|[\s);,/])")


_FAILED = re.compile(r"\b(failed|diverged)(?=: no seed finished)")
SEE_PROBLEMS = "see Problems"  # headline.SEE_PROBLEMS: linked to the Problems list


def sentence_html(text: str) -> str:
    """A headline sentence: the variant before its first colon in bold, each decision in bold
    and coloured by its outcome, an experiment none of whose seeds finished in red, linked to
    the Problems list."""
    variant, sep, rest = text.partition(": ")
    body = _DECISION.sub(lambda m: f'<b class="{m.group(1).split()[0]}">{m.group(1)}</b>', _e(rest))
    body = _FAILED.sub(lambda m: f'<b class="failed">{m.group(1)}</b>', body)
    body = body.replace(SEE_PROBLEMS, f'<a href="#problems">{SEE_PROBLEMS}</a>')
    return f"<b>{_e(variant)}</b>{sep}{body}" if sep else _e(text)


def _md_sentence(text: str) -> str:
    """A headline sentence in Markdown, its 'see Problems' linked to the Problems list."""
    return md_escape(text).replace(SEE_PROBLEMS, "see [Problems](#problems)")


def _html_headline(section: Section | None) -> str:
    """The first screen: the verdict table beside the quality-against-cost picture, its note, then
    the sentences and the method, each folded."""
    if section is None:
        return ""
    items = "".join(f"<li>{sentence_html(n)}</li>" for n in section.notes)
    figs = "".join(_html_figure(f) for f in section.figures)
    tables = "".join(html_table(t, {}) for t in section.tables)  # its title and note hidden in the flex row
    notes = "".join(f'<p class="note">{_e(t.note)}</p>' for t in section.tables if t.note)
    method = (
        f'<details><summary>Method</summary><p class="note">{_e(section.method)}</p></details>'
        if section.method
        else ""
    )
    return (
        f'<section id="s-answer"><h2>{_e(section.title)}</h2><p class="note">{_e(section.intro)}</p>'
        f'<div id="answer">{tables}{figs}</div>{notes}<details><summary>In words</summary><ul id="sentences">'
        f"{items}</ul></details>{method}</section>"
    )


def _grouped(problems: list[Problem], cls: str) -> str:
    """One line per kind of problem; several of a kind fold into a list under their count."""
    groups: dict[tuple[str, str], list[Problem]] = {}
    for p in problems:
        groups.setdefault((p.kind, p.what), []).append(p)
    items = []
    for (kind, what), ps in groups.items():
        if len(ps) == 1:
            items.append(f'<li class="{cls}">{_e(_problem_text(ps[0]))}</li>')
        else:
            inner = "".join(f"<li>{_e(_problem_text(p))}</li>" for p in ps)
            items.append(
                f'<li class="{cls}"><details><summary>{_e(kind)}: {_e(what)} ({len(ps)})</summary>'
                f"<ul>{inner}</ul></details></li>"
            )
    return "<ul>" + "".join(items) + "</ul>"


def _alarm(problems: list[Problem]) -> str:
    """One red line under the title when there are problems, so a fault is never below the fold."""
    if not problems:
        return ""
    kinds: dict[str, int] = {}
    for p in problems:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    what = ", ".join(f"{n} {k}" for k, n in kinds.items())
    return f'<p class="alarm"><a href="#problems">{len(problems)} problem(s): {_e(what)} (listed below)</a></p>'


def to_html(report: Report, links: Callable[[Table], dict[str, str]]) -> str:
    """The page; ``links(table)`` gives {label: relative path} of a table's data files."""
    summary = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in report.summary)
    if report.problems:
        problems = (
            f'<section id="problems" class="problems"><h2>Problems ({len(report.problems)})</h2>'
            f"{_grouped(report.problems, 'bad')}</section>"
        )
    else:
        problems = (
            '<section id="problems" class="ok"><h2>Problems</h2><p>None: every run finished, every '
            "speed point was measured and every trust-gate check passed.</p></section>"
        )
    notes = (
        (
            f'<section id="notes" class="notes"><h2>Notes: limits of this budget ({len(report.notes)})</h2>'
            f"{_grouped(report.notes, 'note')}</section>"
        )
        if report.notes
        else ""
    )
    toc = "".join(
        f'<li><a href="#{_anchor(s.title)}">{_e(s.title)}</a>'
        + (" (missing)" if s.missing else "")
        + (' (failed: <a href="#problems">see Problems</a>)' if s.failed else "")
        + "</li>"
        for s in report.sections
    )
    body = "".join(_html_section(s, links) for s in report.sections)
    description = f'<p class="description">{_e(report.description)}</p>' if report.description else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>attnbench report: {_e(report.suite)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>attnbench report: {_e(report.suite)}</h1>{description}"
        f'<dl class="summary">{summary}</dl>'
        f"{_alarm(report.problems)}</header>"
        f"{_html_headline(report.headline)}{problems}{notes}<nav><h2>Contents</h2><ul>{toc}</ul></nav>{body}"
        "</body></html>\n"
    )


# -- Markdown -----------------------------------------------------------------------------
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|])")


def md_escape(value: object) -> str:
    """Text safe in a Markdown table cell: HTML-escaped, Markdown syntax and pipes escaped,
    on one line."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_table(view: pd.DataFrame) -> str:
    head = "| " + " | ".join(md_escape(c) for c in view.columns) + " |"
    rule = "|" + "|".join("---" for _ in view.columns) + "|"
    rows = ["| " + " | ".join(md_escape(cell_text(v)) for v in row) + " |" for row in view.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def to_markdown(report: Report, figure_path: Callable[[str], str], links: Callable[[Table], dict[str, str]]) -> str:
    """The Markdown; ``figure_path(slug)`` is a figure's relative PNG path."""
    out = [f"# attnbench report: {md_escape(report.suite)}", ""]
    out += [f"*{md_escape(report.description)}*", ""] if report.description else []
    out += [f"- **{md_escape(k)}:** {md_escape(v)}" for k, v in report.summary] + [""]
    if report.headline is not None:
        h = report.headline
        out += [f"## {md_escape(h.title)}", "", md_escape(h.intro), ""]
        out += [line for t in h.tables for line in (md_table(t.view), "", md_escape(t.note), "")]
        out += [f"![{md_escape(f.title)}]({figure_path(f.slug)})\n\n*{md_escape(f.caption)}*\n" for f in h.figures]
        out += [f"- {_md_sentence(n)}" for n in h.notes] + [""]
        out += [f"Method: {md_escape(h.method)}", ""] if h.method else []
    out += ["## Problems", ""]
    out += [f"- **{md_escape(_problem_text(p))}**" for p in report.problems] or [
        "None: every run finished, every speed point was measured and every trust-gate check passed."
    ]
    if report.notes:
        out += ["", "## Notes: limits of this budget", ""] + [f"- {md_escape(_problem_text(p))}" for p in report.notes]
    for s in report.sections:
        out += ["", f"## {md_escape(s.title)}", ""]
        if s.missing:
            out += [f"*Missing: {md_escape(s.missing)}.*", ""]
        if s.failed:
            out += [f"**Failed: {md_escape(s.failed)}** ([Problems](#problems)).", ""]
        elif s.intro:
            out += [md_escape(s.intro), ""]
        out += [f"> {md_escape(n)}\n" for n in s.notes]
        for t in s.tables:
            files = ", ".join(f"[{md_escape(k)}]({v})" for k, v in links(t).items())
            out += [f"### {md_escape(t.title)}", ""]
            out += [md_escape(t.note), ""] if t.note else []
            out += [md_table(t.view), ""] + ([f"Data: {files}", ""] if files else [])
        for f in s.figures:
            out += [f"![{md_escape(f.title)}]({figure_path(f.slug)})", "", f"*{md_escape(f.caption)}*", ""]
    return "\n".join(out).rstrip() + "\n"
