"""A griffe extension: ``#:`` comments above an assignment are that attribute's docstring.

fedsec documents module constants and class attributes the Sphinx way, with ``#:`` comment
lines right above the assignment. Griffe reads only a string literal *after* an assignment,
so without this extension those names would reach the API reference undocumented. Used by
mkdocs.yml (mkdocstrings' ``extensions`` option) and by ``tests/test_docs_site.py``.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe


class CommentDocstrings(griffe.Extension):
    """Give an attribute without a docstring the ``#:`` lines directly above it."""

    def on_attribute_instance(self, *, node: ast.AST | griffe.ObjectNode,
                              attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None:
            return
        try:
            lines = attr.lines_collection[attr.filepath]  # type: ignore[index]
        except (KeyError, TypeError):
            return
        found: list[str] = []
        i = attr.lineno - 2  # the line above the assignment, 0-based
        while i >= 0 and lines[i].lstrip().startswith("#:"):
            found.append(lines[i].lstrip()[2:].strip())
            i -= 1
        if found:
            attr.docstring = griffe.Docstring("\n".join(reversed(found)), parent=attr,
                                              lineno=i + 2)
