"""YAML read with limits: nesting depth and alias expansion are bounded while the file is
composed, so a hostile or broken suite is refused with its line instead of exhausting the
stack (20,000 nested brackets) or memory (a "billion laughs" of nested aliases)."""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 64  # lists and mappings inside each other; a suite needs about six
MAX_VALUES = 100_000  # values once every alias is expanded; a large suite has a few thousand


class LimitError(Exception):
    """YAML past a limit; ``line`` is the 1-based line where it was crossed."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts, while composing, how deep collections nest and how many values
    the document holds with every alias expanded (an alias adds its anchor's whole count)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0  # collections enclosing the node being composed
        self._values = 0
        self._aliased = 0  # of those, values that aliases stand for
        self._counted: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height), once composed

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            line = event.start_mark.line + 1
            if node is not None:
                if id(node) not in self._counted:
                    raise LimitError(
                        f"the alias *{event.anchor} is used inside the value its anchor names, "
                        "which would contain itself without end; use an alias only after its "
                        "anchor's value is complete",
                        line,
                    )
                values, height = self._counted[id(node)]
                self._add(values, line, alias=True)
                if self._depth + height > MAX_DEPTH:
                    raise LimitError(self._too_deep(f" once the alias *{event.anchor} is expanded"), line)
            return super().compose_node(parent, index)  # an undefined alias: PyYAML's own error
        event = self.peek_event()
        start = self._values
        nests = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if nests and self._depth + 1 > MAX_DEPTH:
            raise LimitError(self._too_deep(""), event.start_mark.line + 1)
        self._depth += nests
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= nests
        self._add(1, event.start_mark.line + 1)
        self._counted[id(node)] = (
            self._values - start,
            1 + max((self._counted[id(child)][1] for child in _children(node)), default=0) if nests else 0,
        )
        return node

    def _add(self, values: int, line: int, alias: bool = False) -> None:
        self._values += values
        self._aliased += values if alias else 0
        if self._values <= MAX_VALUES:
            return
        if not self._aliased:  # written out value by value: no alias is involved
            raise LimitError(
                f"the YAML holds more than {MAX_VALUES:,} values (the limit) by this line, with no alias "
                "involved; a large suite has a few thousand. Shorten the long list that runs to here (e.g. "
                "a few seeds, or protocol.seeds: {min: 3, max: 10} to add seeds until decided)",
                line,
            )
        raise LimitError(
            f"the YAML expands to more than {MAX_VALUES:,} values (the limit) by this line, "
            f"{self._aliased:,} of them copies that aliases stand for: each *alias stands for a whole copy "
            "of its anchor's value, so aliases of aliases multiply (a 'billion laughs'); refused before "
            "expanding it. Use each anchor fewer times, or write the values out",
            line,
        )

    @staticmethod
    def _too_deep(how: str) -> str:
        return (
            f"lists and mappings nest more than {MAX_DEPTH} levels deep{how} (the limit); a suite "
            "needs a handful. Remove the extra brackets or indentation"
        )


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value)


def load(text: str) -> tuple[Any, Any]:
    """(node tree, data) of one YAML document, both None when it is empty.

    Raises ``LimitError`` past ``MAX_DEPTH`` or ``MAX_VALUES``, ``yaml.YAMLError`` on bad YAML.
    """
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        return node, (None if node is None else loader.construct_document(node))
    finally:
        loader.dispose()
