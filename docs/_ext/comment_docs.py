"""A griffe extension for fedsec's Sphinx-flavoured docstrings, used by the API reference.

* ``#:`` comment lines right above an assignment are that attribute's docstring (fedsec
  documents module constants and class attributes that way; griffe itself reads only a
  string literal *after* an assignment, so those names would reach the reference
  undocumented).
* Sphinx cross-reference roles (``:class:`~fedsec.x.Y```, ``:func:`f```, ``:mod:`m```...)
  become inline code (``Y``, ``f``, ``m``), and reST's ``::`` before a literal block a
  colon; the rest of the text is numpydoc and Markdown already.

Used by mkdocs.yml (mkdocstrings' ``extensions`` option) and by ``tests/test_docs_site.py``.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe


_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    if match.group(1):  # ~a.b.C shows C, as Sphinx does
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


#: reST's "paragraph::" before a literal block: the indented block stays a code block in
#: Markdown, the marker becomes a colon (or goes, after a space).
_LITERAL = re.compile(r"(?m)(\S)::$|\s+::$")


def _markdown(text: str) -> str:
    text = _ROLE.sub(_role, text)
    return _LITERAL.sub(lambda m: f"{m.group(1)}:" if m.group(1) else "", text)


def _walk(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = _markdown(obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _walk(member)  # type: ignore[arg-type]


class CommentDocstrings(griffe.Extension):
    """``#:`` comments as attribute docstrings; Sphinx roles as inline code."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _walk(pkg)

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
