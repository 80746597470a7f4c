"""The public Python API as users find it: ``import fedsec`` and the README's examples."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest

import fedsec

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = ["secure_auc", "secure_auc_malicious", "secure_roc_auc_score", "secure_pfl",
                "dpauc", "federated_shapley",
                "load_party_csv", "load_party_csvs", "trapezoid_auc", "confusion_counts",
                "trapezoid_auc_from_counts", "uniform_decision_points"]
#: Internal class and helper names a user never typed; messages must not speak of them.
INTERNAL_NAMES = ["DPAUCClient", "RRClient", "DPAUCServer", "local_statistics",
                  "PartyStatistics", "check_labels_scores"]


def test_every_public_name_is_importable_and_listed() -> None:
    for name in fedsec.__all__:
        assert getattr(fedsec, name) is not None, name
    for name in ENTRY_POINTS:
        assert name in fedsec.__all__
    assert {"SecureAUCResult", "DPAUCResult", "ShapleyResult", "PartyData",
            "TamperingDetected", "UndefinedMetricError", "PrivacyWarning"} <= set(fedsec.__all__)
    assert set(fedsec.__all__) <= set(dir(fedsec))
    namespace: dict[str, object] = {}
    exec("from fedsec import *", namespace)
    assert set(fedsec.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = fedsec.nope  # type: ignore[attr-defined]


def test_shortcuts_are_the_real_functions() -> None:
    import fedsec.api
    from fedsec.shapley.fsv import federated_shapley

    # the AUC entry points take the shapes users have (fedsec.api), then run the protocol
    assert fedsec.secure_auc is fedsec.api.secure_auc
    assert fedsec.secure_auc_malicious is fedsec.api.secure_auc_malicious
    assert fedsec.dpauc is fedsec.api.dpauc
    assert fedsec.secure_pfl is fedsec.api.secure_pfl
    assert fedsec.federated_shapley is federated_shapley


def test_import_fedsec_loads_neither_seal_nor_torch() -> None:
    code = ("import sys, fedsec; assert fedsec.__version__; "
            "print(sorted(m for m in ('tenseal', 'torch', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src")}, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_points_are_fully_annotated(name: str) -> None:
    func = getattr(fedsec, name)
    hints = typing.get_type_hints(func)
    params = [p for p in inspect.signature(func).parameters.values()
              if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    for p in params:
        assert p.name in hints, f"{name}({p.name}) has no type hint"
    assert "return" in hints, f"{name} has no return type"
    assert func.__doc__ and "Parameters" in func.__doc__ or name in (
        "trapezoid_auc", "confusion_counts", "trapezoid_auc_from_counts",
        "uniform_decision_points", "secure_auc_malicious", "federated_shapley"), name


def test_result_fields_are_typed_attributes() -> None:
    hints = typing.get_type_hints(fedsec.SecureAUCResult)
    assert hints["verified"] is bool and hints["error_bound"] is float
    assert hints["cheat_bound_bits"] == float | None
    semi = fedsec.SecureAUCResult(
        auc=0.5, parties=2, decision_points=10, security="semi-honest", masking="single",
        preset="p", bytes_up_per_party=1, bytes_down_per_party=1, aggregator_seconds=0.0,
        setup_bytes_to_aggregator=0, setup_seconds=0.0)
    assert semi.verified is False and semi.cheat_bound_bits is None


def _parties(seed: int, sizes: tuple[int, ...] = (40, 30)) -> list[tuple[np.ndarray,
                                                                       np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = rng.integers(0, 2, n)
        out.append((y, np.clip(0.4 * y + 0.6 * rng.random(n), 0, 1)))
    return out


def test_malicious_result_attributes_from_a_real_run() -> None:
    res = fedsec.secure_auc(_parties(0), decision_points=16, security="malicious")
    assert res.verified is True
    assert res.cheat_bound_bits is not None and res.cheat_bound_bits >= 40
    assert res.cheat_bound_bits == res.extra["cheat_bound_bits"]
    y = np.concatenate([p[0] for p in _parties(0)])
    s = np.concatenate([p[1] for p in _parties(0)])
    assert abs(res.auc - fedsec.trapezoid_auc(y, s, 16)) < 1e-8


# ------------------------------------------------------------------ messages
def _message(func: typing.Callable[[], object]) -> str:
    with pytest.raises((TypeError, ValueError)) as info:
        func()
    return str(info.value)


@pytest.mark.parametrize(("call", "expected"), [
    (lambda: fedsec.dpauc(_parties(1), epsilon=float("inf")),
     "The 'epsilon' parameter of dpauc must be finite. Got inf instead."),
    (lambda: fedsec.dpauc(_parties(1), epsilon=-1.0),
     "The 'epsilon' parameter of dpauc must be > 0.0. Got -1.0 instead."),
    (lambda: fedsec.dpauc(_parties(1), epsilon=1.0, mechanism="gaussian"),
     "The 'delta' parameter of dpauc is required for mechanism='gaussian'."),
    (lambda: fedsec.dpauc(_parties(1), epsilon=1.0, delta=0.1),
     "The 'delta' parameter of dpauc applies only to mechanism='gaussian'."),
    (lambda: fedsec.dpauc(_parties(1), epsilon=1.0, mechanism="gaussian", delta=2.0),
     "The 'delta' parameter of dpauc must be < 1.0. Got 2.0 instead."),
    (lambda: fedsec.dpauc([([0, 2], [0.1, 0.2])], epsilon=1.0),
     "y_true of dpauc (party 1) must contain only 0 and 1. Got 2."),
    (lambda: fedsec.dpauc([([0, 1], [0.1, 0.2]), ([0, 1], [0.1, 1.5])], epsilon=1.0,
                          mechanism="rr", score_epsilon=1.0),
     "y_score of dpauc (party 2) must lie in [0, 1]."),
    (lambda: fedsec.dpauc([([0, 1], [0.1, 0.2, 0.3])], epsilon=1.0),
     "y_true and y_score of dpauc (party 1) must have the same length."),
    (lambda: fedsec.dpauc([[0, 1, 0]], epsilon=1.0),  # type: ignore[list-item]
     "The 'parties' parameter of dpauc must hold (y_true, y_score) pairs,"),
    (lambda: fedsec.dpauc(_parties(1), epsilon=1.0, score_epsilon=1.0),
     "The 'score_epsilon' parameter of dpauc applies only to mechanism='rr'."),
    (lambda: fedsec.dpauc(_parties(1), epsilon=1.0, clip="yes"),  # type: ignore[arg-type]
     "The 'clip' parameter of dpauc must be a bool."),
])
def test_dpauc_messages_speak_of_the_users_arguments(call: typing.Callable[[], object],
                                                     expected: str) -> None:
    msg = _message(call)
    assert expected in msg
    for internal in INTERNAL_NAMES:
        assert internal not in msg


def test_dpauc_noise_is_not_seeded_by_any_generator() -> None:
    """Seeding numpy's global generator (what a user reaching for reproducibility does)
    must not make the DP noise repeat."""
    parties = _parties(2, (300, 300))
    aucs = []
    for _ in range(3):
        np.random.seed(0)  # noqa: NPY002 - the point of the test
        aucs.append(fedsec.dpauc(parties, epsilon=1.0, decision_points=20).auc)
    assert len(set(aucs)) == 3
    assert "seed" not in inspect.signature(fedsec.dpauc).parameters


def test_dpauc_clip() -> None:
    parties = [([1, 0], [0.9, 0.1]), ([0, 1], [0.3, 0.7])]
    results = [fedsec.dpauc(parties, epsilon=0.01, clip=True) for _ in range(10)]
    assert all(0.0 <= r.auc <= 1.0 for r in results)
    assert any(r.clipped for r in results)  # Laplace scale 40,000 on 4 samples
    for r in results:
        assert r.clipped == (r.raw_auc != r.auc)
        assert r.auc == min(1.0, max(0.0, r.raw_auc))
    raw = fedsec.dpauc(parties, epsilon=0.01)
    assert raw.clipped is False and raw.raw_auc == raw.auc


# ------------------------------------------------------------------ the README's examples
def _readme_api_examples() -> list[str]:
    # the README's secure AUC example, then the DPAUC guide's (moved there from the README)
    text = (ROOT / "README.md").read_text() + (ROOT / "docs" / "guide" / "dpauc.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return [b for b in blocks if b.startswith("import numpy as np\nimport fedsec\n")]


def test_readme_shows_secure_auc_dpauc_and_metrics() -> None:
    joined = "\n".join(_readme_api_examples())
    for call in ("fedsec.secure_auc(", "fedsec.dpauc(", "fedsec.trapezoid_auc(",
                 "fedsec.confusion_counts(", "result.verified", "result.cheat_bound_bits"):
        assert call in joined


@pytest.mark.parametrize("index", [0, 1])
def test_readme_api_examples_run(index: int) -> None:
    block = _readme_api_examples()[index]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.warns(fedsec.PrivacyWarning) \
            if "rr" in block and "mechanism=\"rr\"" in block else contextlib.nullcontext():
        exec(compile(block, f"README example {index}", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines
    if index == 0:  # the comment in the README states what this prints
        auc, verified, bits = lines[0].split()
        assert auc.startswith("0.8897") and verified == "True"
        assert float(bits) == pytest.approx(58.7, abs=0.05)
        assert "# 0.8897..., True, 58.7" in block
    else:
        ref = float(lines[2])
        assert float(lines[3]) == pytest.approx(ref, abs=1e-12)


def test_secure_auc_errors_speak_of_the_users_arguments() -> None:
    import fedsec

    parties = [([0, 1], [0.1, 0.9]), ([0, 1], [0.2, 0.3])]
    with pytest.raises(ValueError, match="'decision_points' parameter of secure_auc"):
        fedsec.secure_auc(parties, decision_points=1)
    with pytest.raises(ValueError, match="'runs' parameter of secure_auc_malicious"):
        fedsec.secure_auc(parties, security="malicious", runs=1)
    with pytest.warns(DeprecationWarning, match="secure_auc_malicious is deprecated"), \
            pytest.raises(ValueError, match="'decision_points' parameter of "
                                            "secure_auc_malicious"):
        fedsec.secure_auc_malicious(parties, decision_points=1)
    with pytest.raises(ValueError, match="party 1") as exc:
        fedsec.secure_auc([([0, 1], [0.1, 0.9]), ([0, 1, 1], [0.2, 0.3])])
    assert "FHAUCParty" not in str(exc.value)
