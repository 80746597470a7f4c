"""The documentation site builds cleanly, documents every public name, and cites papers.

* ``mkdocs build --strict`` (mkdocs.yml) succeeds: a broken link, a page missing from the
  navigation or an unresolvable API reference is a warning, and --strict makes it an error.
* Every name of ``fedsec.__all__``, and of the ``__all__`` of every module the API reference
  renders (``::: module`` in docs/reference/*.md), appears in the built reference with an
  anchor of its own and has a docstring.
* User-visible text names papers, never internal labels ("seed 003", "issue 10"): the grep of
  the project's definition of done finds nothing in src, docs and README.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
#: The packages the API reference must cover (a page may add modules, never drop these).
PUBLIC_PACKAGES = ("fedsec", "fedsec.auc", "fedsec.metrics", "fedsec.data", "fedsec.learning",
                   "fedsec.shapley", "fedsec.pfl", "fedsec.protocol", "fedsec.crypto",
                   "fedsec.runtime", "fedsec.errors")
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
#: The definition of done's grep: internal labels instead of paper names.
INTERNAL_LABEL = re.compile(r"seed 00[0-4]|issue [0-9]|issue #[0-9]", re.IGNORECASE)


def _rendered_modules() -> list[str]:
    found: list[str] = []
    for page in sorted(REFERENCE.glob("*.md")):
        found += _DIRECTIVE.findall(page.read_text(encoding="utf-8"))
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (make test does)")
    pytest.importorskip("mkdocstrings")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.fixture(scope="module")
def griffe_package() -> object:
    griffe = pytest.importorskip("griffe")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from comment_docs import CommentDocstrings  # the extension mkdocs.yml loads
    finally:
        sys.path.pop(0)
    return griffe.load("fedsec", search_paths=[str(ROOT / "src")],
                       extensions=griffe.Extensions(CommentDocstrings()))


def _public_names() -> list[tuple[str, str]]:
    """``(module, name)`` for every ``__all__`` entry of every rendered public package.

    The public packages, and the subpackages a reference page renders (``fedsec.pfl.secure``),
    are what users import from; a module rendered inside a package's page
    (``fedsec.auc.fhauc``) shows its documented names without being held to this list.
    """
    import griffe

    pkg = griffe.load("fedsec", search_paths=[str(ROOT / "src")])
    pairs: list[tuple[str, str]] = []
    for module in dict.fromkeys(_rendered_modules()):
        obj = pkg if module == "fedsec" else pkg[module.removeprefix("fedsec.")]
        if module not in PUBLIC_PACKAGES and obj.filepath.name != "__init__.py":
            continue
        for name in obj.exports or ():
            if not (name.startswith("__") and name.endswith("__")):  # __version__: no object
                pairs.append((module, str(name)))
    return pairs


def test_reference_covers_every_public_package() -> None:
    missing = sorted(set(PUBLIC_PACKAGES) - set(_rendered_modules()))
    assert not missing, f"no API reference page renders {missing}"


def test_fedsec_all_is_in_the_reference() -> None:
    pytest.importorskip("griffe")
    names = {name for module, name in _public_names() if module == "fedsec"}
    import fedsec

    expected = {n for n in fedsec.__all__ if not n.startswith("__")}
    assert expected and names == expected


def test_site_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "fedsec" / "index.html").is_file()


def test_every_public_name_has_an_anchor(site: Path) -> None:
    html = "\n".join(p.read_text(encoding="utf-8")
                     for p in (site / "reference").rglob("index.html"))
    anchors = set(re.findall(r'id="(fedsec[\w.]*)"', html))
    pairs = _public_names()
    assert len(pairs) > 50
    missing = [f"{m}.{n}" for m, n in pairs if f"{m}.{n}" not in anchors]
    assert not missing, f"public names missing from the API reference: {missing}"


def test_every_public_name_has_a_docstring(griffe_package: object) -> None:
    pkg = griffe_package
    undocumented = []
    for module, name in _public_names():
        parent = pkg if module == "fedsec" else pkg[module.removeprefix("fedsec.")]  # type: ignore[index]
        obj = parent[name]
        doc = obj.docstring  # resolves an alias to its target
        if doc is None or not doc.value.strip():
            undocumented.append(f"{module}.{name}")
    assert not undocumented, f"public names without a docstring: {undocumented}"


def _user_visible_files() -> list[Path]:
    files = [ROOT / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    # every source file, the command line's included (its help text and reports are
    # user-visible); build outputs such as *.egg-info are not sources
    files += sorted(p for p in (ROOT / "src" / "fedsec").rglob("*") if p.is_file()
                    and p.suffix in {".py", ".md", ".toml", ".txt", ".json"})
    return files


def test_no_internal_labels_in_user_visible_text() -> None:
    hits = []
    for path in _user_visible_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if INTERNAL_LABEL.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "internal labels instead of paper names:\n" + "\n".join(hits)


def test_the_label_grep_would_catch_a_label() -> None:
    for text in ("as seed 004 does", "see Issue 10", "issue #3", "Seed 002's CNN"):
        assert INTERNAL_LABEL.search(text)
    assert not INTERNAL_LABEL.search("Zheng et al. (PVLDB 2023), seed 7, seed 010")
