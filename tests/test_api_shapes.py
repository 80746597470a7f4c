"""``fedsec.secure_auc`` and friends take the shapes users have: ``load_party_csvs``'s
``PartyData``, ``(y_true, y_score)`` pairs, data frames, ``{name: party}`` mappings; the
scikit-learn-shaped ``secure_roc_auc_score``; the deprecated ``secure_auc_malicious``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import fedsec
from fedsec.api import as_parties
from fedsec.data.io import write_party_csv

N = 16  # decision points: fast, and the trapezoid over them is what every shape must give


def _data(seed: int = 0, sizes: tuple[int, ...] = (40, 30, 25)) -> list[tuple[Any, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = rng.integers(0, 2, n)
        out.append((y, np.clip(0.35 * y + 0.65 * rng.random(n), 0, 1)))
    return out


def _reference(parties: list[tuple[Any, Any]], n: int = N) -> float:
    y = np.concatenate([p[0] for p in parties])
    s = np.concatenate([p[1] for p in parties])
    return fedsec.trapezoid_auc(y, s, n)


class Frame:
    """The least a data frame offers: ``columns`` and ``frame[column]`` (no pandas)."""

    def __init__(self, **cols: Any) -> None:
        self._cols = {k: np.asarray(v) for k, v in cols.items()}
        self.columns = list(cols)

    def __getitem__(self, key: str) -> Any:
        return self._cols[key]


def test_load_party_csvs_result_goes_straight_in(tmp_path: Path) -> None:
    parties = _data(1)
    paths = []
    for i, (y, s) in enumerate(parties):
        paths.append(tmp_path / f"clinic-{i}.csv")
        write_party_csv(paths[-1], y, s)
    res = fedsec.secure_auc(fedsec.load_party_csvs(paths), decision_points=N)
    assert abs(res.auc - _reference(parties)) < 1e-8
    assert res.included == ["clinic-0", "clinic-1", "clinic-2"]  # PartyData names kept


def test_mapping_of_pairs_keeps_the_names() -> None:
    parties = _data(2)
    res = fedsec.secure_auc({"north": parties[0], "south": parties[1], "east": parties[2]},
                            decision_points=N)
    assert res.included == ["north", "south", "east"]
    assert abs(res.auc - _reference(parties)) < 1e-8


def test_frames_with_named_columns() -> None:
    parties = _data(3)
    frames = [Frame(age=np.arange(len(y)), outcome=y.astype(bool), prob=s)
              for y, s in parties]
    res = fedsec.secure_auc(frames, label_col="outcome", score_col="prob", decision_points=N)
    assert abs(res.auc - _reference(parties)) < 1e-8
    # default column names, matched case-insensitively
    frames = [Frame(Label=y, Score=s) for y, s in parties]
    assert abs(fedsec.secure_auc(frames, decision_points=N).auc - _reference(parties)) < 1e-8


def test_pandas_data_frames() -> None:
    pd = pytest.importorskip("pandas")
    parties = _data(4)
    frames = {f"h{i}": pd.DataFrame({"label": y, "score": s, "site": "x"})
              for i, (y, s) in enumerate(parties)}
    res = fedsec.secure_auc(frames, decision_points=N)
    assert res.included == ["h0", "h1", "h2"]
    assert abs(res.auc - _reference(parties)) < 1e-8
    from fedsec.protocol.network import Network

    net = Network()
    dp = fedsec.dpauc(list(frames.values()), epsilon=8.0, decision_points=N, network=net)
    senders = {s for s, _, _ in net.accounting.messages if s.startswith("party:")}
    assert len(senders) == 3 and np.isfinite(dp.auc)  # every frame became a party


def test_secure_roc_auc_score_matches_scikit_learn() -> None:
    parties = _data(5, (60, 50))
    ys, ss = [p[0] for p in parties], [p[1] for p in parties]
    got = fedsec.secure_roc_auc_score(ys, ss)
    assert isinstance(got, float)
    expected = roc_auc_score(np.concatenate(ys), np.concatenate(ss))
    assert abs(got - expected) <= 1e-6 + 1e-8  # exact mode's certified target, CKKS error
    grid = fedsec.secure_roc_auc_score(ys, ss, decision_points=N)
    assert abs(grid - _reference(parties)) < 1e-8


def test_secure_auc_malicious_is_deprecated_but_works() -> None:
    parties = _data(6, (30, 30))
    with pytest.warns(DeprecationWarning, match=r"secure_auc\(parties, security='malicious'"):
        res = fedsec.secure_auc_malicious(parties, decision_points=N)
    assert res.verified is True and res.security == "malicious"
    assert abs(res.auc - _reference(parties)) < 1e-8


@pytest.mark.parametrize(("parties", "kwargs", "error", "needle"), [
    ("a.csv", {}, TypeError, "'parties' parameter of secure_auc must be a list"),
    (np.zeros((3, 2)), {}, TypeError, "'parties' parameter of secure_auc"),
    ([[0, 1, 0]], {}, TypeError, "Got a list of length 3 for party 1"),
    ([([0, 1], [0.1, 0.9]), 7], {}, TypeError, "Got int for party 2"),
    ([Frame(y=[0, 1], s=[0.1, 0.2])], {}, ValueError, "'label_col' parameter of secure_auc"),
    ([Frame(label=[0, 1], s=[0.1, 0.2])], {}, ValueError,
     "names the score column 'score', which party 1 does not have (columns: 'label', 's')"),
    ({1: ([0, 1], [0.1, 0.2])}, {}, TypeError, "must have str keys"),
    ({"label": [0, 1], "score": [0.1, 0.2]}, {}, TypeError, "Got dict instead"),
    ([], {}, ValueError, "must not be empty"),
    ([([0, 1], [0.1, 0.9]), ([1, 0], [0.2, 0.3])], {"names": ["a"]}, ValueError,
     "'names' parameter of secure_auc"),
])
def test_bad_shapes_name_the_parameter(parties: Any, kwargs: dict[str, Any],
                                       error: type[Exception], needle: str) -> None:
    with pytest.raises(error) as info:
        as_parties(parties, **kwargs)
    assert needle in str(info.value)
    with pytest.raises(error):  # the entry point refuses before any key is made
        fedsec.secure_auc(parties, **kwargs)


def test_roc_auc_score_shapes_are_checked() -> None:
    with pytest.raises(TypeError, match="'y_true_per_party' parameter"):
        fedsec.secure_roc_auc_score(np.array([0, 1]), [[0.1, 0.2]])
    with pytest.raises(ValueError, match="one entry per party"):
        fedsec.secure_roc_auc_score([[0, 1], [1, 0]], [[0.1, 0.2]])


def test_dpauc_message_for_a_bad_party() -> None:
    with pytest.raises(TypeError, match="'parties' parameter of dpauc must hold"):
        fedsec.dpauc([[0, 1, 0]], epsilon=1.0)
