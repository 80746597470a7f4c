"""``fedsec flower local``: a protocol as separate processes on this machine, the same
result as the in-process command, and no process left behind."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("flwr", reason="Flower is optional: pip install 'fedsec[flower]'")

from fedsec.cli import main as fedsec_main  # noqa: E402
from fedsec.data.io import write_party_csv  # noqa: E402
from fedsec.runtime.local_deploy import leftover_processes  # noqa: E402


def _files(root: Path) -> list[str]:
    rng = np.random.default_rng(11)
    out = []
    for i, n in enumerate([40, 60, 50]):
        y = (rng.random(n) < 0.4).astype(int)
        y[:2] = [0, 1]
        s = np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1)
        path = root / f"site{i}.csv"
        write_party_csv(path, y, s)
        out.append(str(path))
    return out


def test_flower_local_auc_matches_the_in_process_command(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    files = _files(tmp_path)
    work = tmp_path / "work"
    code = fedsec_main(["flower", "local", "auc", *files, "--security", "semi-honest",
                        "--json", "--workdir", str(work), "--timeout", "240"])
    flower = json.loads(capsys.readouterr().out)
    assert code == 0
    assert fedsec_main(["auc", *files, "--security", "semi-honest", "--json", "-q"]) == 0
    inproc = json.loads(capsys.readouterr().out)
    # both add the parties' own noise: equal to the protocol's precision
    assert flower["auc"] == pytest.approx(inproc["auc"], abs=1e-7)
    assert flower["included"] == ["site0", "site1", "site2"]
    assert flower["decision_points"] == inproc["decision_points"] == 100
    assert flower["flower"]["exchanges"] == 5  # hello, offer, deliver, confirmed, finalize
    assert set(flower["party_aucs"]) == {"site0", "site1", "site2"}
    # every process the command started is gone, Flower's own children included
    assert leftover_processes(str(work / "flower" / "flwr-home")) == []
    # each party's log and result stayed in its own state folder
    assert (work / "logs" / "site0.log").read_text().count("result: AUC") == 1


def test_flower_local_refuses_bad_input_before_starting_anything(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]):
    files = _files(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("label,score\n1,0.5\n0,1.7\n")
    code = fedsec_main(["flower", "local", "auc", files[0], str(bad), "--workdir",
                        str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert code == 2 and "bad.csv" in err
    assert not (tmp_path / "w" / "flower").exists()


def test_flower_local_dpauc_matches_the_in_process_command(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]):
    """Randomized response at epsilon 50 flips no label (probability ~2e-22): both runs
    compute the same statistic, so they agree exactly."""
    files = _files(tmp_path)
    work = tmp_path / "work"
    code = fedsec_main(["flower", "local", "dpauc", *files, "--mechanism", "rr",
                        "--epsilon", "50", "-N", "20", "--json", "--workdir", str(work),
                        "--timeout", "240"])
    flower = json.loads(capsys.readouterr().out)
    assert code == 0
    assert fedsec_main(["dpauc", *files, "--mechanism", "rr", "--epsilon", "50", "-N", "20",
                        "--json"]) == 0
    inproc = json.loads(capsys.readouterr().out)
    assert flower["auc"] == inproc["mean"]
    assert flower["flower"]["exchanges"] == 2 and flower["parties"] == 3
    assert leftover_processes(str(work / "flower" / "flwr-home")) == []


@pytest.mark.slow  # two runs of six SuperNodes each: ~2.5 min on an idle 2-core machine
def test_flower_local_shapley_matches_the_in_process_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Secure FedAvg, then HESV, as separate processes: the same federated Shapley values
    as ``fedsec shapley --protocol hesv`` on the same task, split and seed (the secure
    aggregate equals plaintext FedAvg to fixed point)."""
    pytest.importorskip("torch")
    work = tmp_path / "work"
    args = ["--task", "bank", "--clients", "6", "--rounds", "2", "--samples", "360",
            "--alpha", "0.5", "--seed", "0"]
    assert fedsec_main(["flower", "local", "shapley", *args, "--participation", "0.5",
                        "--json", "--workdir", str(work)]) == 0
    flower = json.loads(capsys.readouterr().out)
    assert fedsec_main(["shapley", *args, "--participation", "0.5", "--protocol", "hesv",
                        "--json", "-q"]) == 0
    inproc = json.loads(capsys.readouterr().out)
    assert flower["fsv"] == pytest.approx(inproc["fsv"], abs=1e-12)
    assert flower["flower"]["training_exchanges"] == 4
    assert leftover_processes(str(work / "flower" / "flwr-home")) == []
