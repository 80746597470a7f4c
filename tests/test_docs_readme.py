"""Every Python example of README.md runs as it stands, in order, in one namespace.

The README shows one short example per task (secure AUC, DPAUC, Shapley values,
personalised FL); a reader pastes them one after the other, so they run that way here.
(``tests/test_api.py`` also checks what the secure AUC example prints.)
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_an_example_per_task() -> None:
    joined = "\n".join(_blocks())
    for call in ("fedsec.secure_auc(", "fedsec.dpauc(", "fedsec.secure_shapley(", "run_pfl("):
        assert call in joined, call


def test_readme_examples_run_in_order() -> None:
    pytest.importorskip("torch", reason="the Shapley and PFL examples need the learning extra")
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for index, block in enumerate(_blocks()):
            exec(compile(block, f"README example {index}", "exec"), namespace)
    lines = out.getvalue().splitlines()
    assert len(lines) >= len(_blocks())
    auc = namespace["result"].auc  # type: ignore[attr-defined]
    assert 0.5 < auc < 1.0
    fsv = namespace["res"].fsv  # type: ignore[attr-defined]
    assert len(fsv) == 5
    run = namespace["run"]
    assert 0.0 <= run.benign_worst() <= run.benign_mean() <= 1.0  # type: ignore[attr-defined]
