"""The report as data, independent of its output format: sections of prose, tables and
figures, and the problems listed at the top. Renderers (``render.py``) turn it into HTML
and Markdown; ``write.py`` writes each table as CSV and Parquet."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Table:
    """A table twice: ``data`` with raw values (written to CSV/Parquet, one scalar per
    cell) and ``view`` with the same rows formatted for reading (strings)."""

    slug: str  # file name stem, unique within a report
    title: str
    data: pd.DataFrame
    view: pd.DataFrame
    note: str = ""


@dataclass
class Figure:
    """A figure as PNG (written beside the Markdown, embedded in the page) and, where it has
    one, as SVG with its text kept as text (inlined in the page instead of the PNG)."""

    slug: str  # file name stem, unique within a report
    title: str
    png: bytes
    caption: str = ""
    svg: str = ""


@dataclass
class Section:
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    missing: str = ""  # set when the store lacks this section's data: what to run instead
    failed: str = ""  # set when the section's experiment ran but no run finished: what happened
    method: str = ""  # the full method, folded below the section's one-sentence intro


@dataclass
class Problem:
    """One thing a reader must not miss: a diverged or failed run, a speed point that
    ran out of memory or time, a failed trust-gate check."""

    kind: str  # "run", "speed point", "trust gate", "fit"
    variant: str
    where: str  # experiment (and seed / mode / T) or check name
    what: str  # status, stated plainly
    detail: str = ""


@dataclass
class Report:
    suite: str
    store: str
    generated_at: str
    summary: list[tuple[str, str]]  # (label, value) lines shown under the title
    problems: list[Problem]
    sections: list[Section]
    headline: Section | None = None  # the first screen: what the run found, and the quality-cost picture
    notes: list[Problem] = field(default_factory=list)  # limits of the budget, not faults
    description: str = ""  # the suite's description: one line under the title

    def tables(self) -> list[Table]:
        return [t for s in self.sections for t in s.tables]

    def figures(self) -> list[Figure]:
        head = self.headline.figures if self.headline else []
        return [*head, *(f for s in self.sections for f in s.figures)]
