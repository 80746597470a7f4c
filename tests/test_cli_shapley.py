"""``fedsec shapley``: JSON and human output, plot, estimator error, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedsec.cli import main

pytest.importorskip("torch", reason="fedsec shapley needs fedsec[learning] (torch)")

SMALL = ["shapley", "--task", "bank", "--samples", "300", "--clients", "3", "--rounds", "2"]


def test_json_with_estimator_sample_skip_and_plot(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "ssv.png"
    code = main([*SMALL, "--estimator", "ps", "--budget", "3", "--sample-skip", "--audit",
                 "--json", "--plot", str(png), "--save-record", str(tmp_path / "rec.bin")])
    out = capsys.readouterr()
    assert code == 0
    assert out.err == ""  # --json keeps stderr quiet
    doc = json.loads(out.out)
    assert doc["estimator"] == "ps" and doc["budget"] == 3 and doc["sample_skip"] is True
    assert len(doc["fsv"]) == 3 and np.array(doc["ssv"]).shape == (2, 3)
    np.testing.assert_allclose(np.sum(doc["ssv"], axis=0), doc["fsv"])
    assert doc["error"] == pytest.approx(np.linalg.norm(np.subtract(doc["fsv"],
                                                                    doc["exact_fsv"])))
    assert doc["sample_skip_stats"]["wrongly_skipped"] == 0  # logistic: Theorem 6.3
    assert doc["timings"]["evaluation_s"] >= 0 and doc["timings"]["exact_s"] >= 0
    assert doc["real_data"] is False and "stand-in" in doc["data"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from fedsec.learning.record import TrainingRecord

    assert TrainingRecord.from_bytes((tmp_path / "rec.bin").read_bytes()).n_rounds == 2


def test_exact_human_output_and_progress(capsys) -> None:
    assert main(SMALL) == 0
    out = capsys.readouterr()
    assert "FSV" in out.out and "per-round SSV" in out.out
    assert "error vs exact" not in out.out  # exact: nothing to compare with
    assert "training round 2/2" in out.err
    assert out.err.count("exact: round 2/2") == 1  # exact is computed once


def test_exact_with_sample_skip_reports_error(capsys) -> None:
    assert main([*SMALL, "--sample-skip", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"] == 0.0 and doc["exact_fsv"] == doc["fsv"]


@pytest.mark.parametrize("argv", [
    ["--clients", "0"], ["--participation", "1.5"], ["--estimator", "tmc"],
    ["--budget", "0"], ["--task", "cifar"],
])
def test_bad_arguments_exit_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, *argv])
    assert exc.value.code == 2


def test_bad_plot_name_exits_2(tmp_path: Path, capsys) -> None:
    assert main([*SMALL, "--plot", str(tmp_path / "x.txt")]) == 2
    assert "png" in capsys.readouterr().err


def test_missing_torch_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fedsec.learning.torch_net", None)
    assert main(SMALL) == 2
    assert "fedsec[learning]" in capsys.readouterr().err


@pytest.mark.parametrize("protocol", ["hesv", "secsv", "secretsv"])
def test_secure_protocols_match_nssv_and_report_costs(protocol: str, capsys) -> None:
    skip = [] if protocol == "hesv" else ["--sample-skip"]  # HESV's test data are encrypted
    code = main([*SMALL, "--protocol", protocol, *skip, "--json", "--workers", "1",
                 "--schedule", "paper"])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert code == 0 and doc["protocol"] == protocol
    assert "fedsec: privacy warning:" in out.err and "solve for" in out.err
    assert doc["error"] is not None and doc["error"] <= 1e-3  # against NSSV
    split = doc["time_split_seconds"]
    assert set(split) >= {"arithmetic", "encryption", "decryption", "share_generation",
                          "communication", "total"}
    assert doc["bytes_total"] == sum(m["bytes"] for m in doc["messages"]) > 0
    roles = {"server", "client"} if protocol == "hesv" else {"P", "A", "client"}
    assert roles <= set(doc["bytes_by_role"])
    if protocol == "hesv":
        assert doc["fixed_point"] is None
    else:  # the fixed point P chose, per layer, and the error it permits
        fixed = doc["fixed_point"]
        assert len(fixed["frac_model"]) == len(fixed["frac_inputs"]) == 1
        assert 0 < fixed["score_error_bound"] < 1e-3


def test_secsv_derived_and_per_coalition_decryption(capsys) -> None:
    """Default secsv (no SampleSkip, one layer): one decryption request per batch and
    round; --per-coalition-decryption: one per coalition and batch, the same FSV."""
    docs = []
    for extra in ([], ["--per-coalition-decryption"]):
        assert main([*SMALL, "--protocol", "secsv", "--json", "--workers", "1",
                     "--schedule", "paper", *extra]) == 0
        docs.append(json.loads(capsys.readouterr().out))

    def requests(doc: dict) -> int:
        return sum(m["count"] for m in doc["messages"]
                   if m["sender"] == "P" and m["receiver"].startswith("client:")
                   and m["kind"] in ("secsv/decrypt", "secsv/decrypt-all"))

    np.testing.assert_array_equal(docs[0]["fsv"], docs[1]["fsv"])
    assert docs[0]["error"] <= 1e-3
    assert 0 < requests(docs[0]) * 2 < requests(docs[1])  # 2^3 coalitions vs 1 request


def test_strict_schedule_refuses_or_runs(capsys) -> None:
    """The default schedule: exact SSVs with every client in every round are refused
    (exit 2, saying why and what to do); a small permutation-sampling budget runs."""
    assert main([*SMALL, "--protocol", "secsv", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "solve for them" in err and "--schedule paper" in err
    assert "--estimator with a small --budget" in err and "--participation below 1" in err
    small5 = ["shapley", "--task", "bank", "--samples", "300", "--clients", "5",
              "--rounds", "2"]
    assert main([*small5, "--protocol", "secsv", "--workers", "1", "--estimator", "ps",
                 "--budget", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["protocol"] == "secsv" and doc["estimator"] == "ps" and len(doc["fsv"]) == 5


def test_secure_protocol_option_errors(capsys) -> None:
    assert main([*SMALL, "--protocol", "secsv", "--audit", "--sample-skip"]) == 2
    assert "--audit" in capsys.readouterr().err
    assert main([*SMALL, "--no-shortcut"]) == 2
    assert "--no-shortcut" in capsys.readouterr().err
    for proto in ("nssv", "hesv"):
        assert main([*SMALL, "--protocol", proto, "--per-coalition-decryption"]) == 2
        assert "--per-coalition-decryption" in capsys.readouterr().err
    assert main([*SMALL, "--protocol", "hesv", "--sample-skip"]) == 2
    assert "secsv" in capsys.readouterr().err
    assert main([*SMALL, "--protocol", "secsv", "--ray-address", "127.0.0.1:1"]) == 2
    assert "--backend ray" in capsys.readouterr().err


def test_fixed_point_levers_and_zero_based_clients(capsys) -> None:
    """--frac-bits pins SecSV's fixed point (reported as such); clients are numbered from
    0 as in the Python API; the FSV's unit is explained."""
    assert main([*SMALL, "--protocol", "secsv", "--workers", "1", "--schedule", "paper",
                 "--frac-bits", "12", "--plain-bits", "58"]) == 0
    out = capsys.readouterr().out
    assert "fixed point: weights [12], inputs [12] fractional bits" in out
    rows = [line.split() for line in out.splitlines() if line[:6].strip().isdigit()]
    assert [r[0] for r in rows[:3]] == ["0", "1", "2"]
    assert "round       c0       c1       c2" in out
    assert "accuracy points" in out
    for proto in ("nssv", "hesv", "secretsv"):
        assert main([*SMALL, "--protocol", proto, "--frac-bits", "12"]) == 2
        assert "apply to --protocol secsv only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, "--protocol", "secsv", "--plain-bits", "60"])
    assert exc.value.code == 2 and "20..59" in capsys.readouterr().err


def test_time_split_says_what_it_covers(capsys) -> None:
    """The split is the roles' clocks (summed over roles and workers) plus simulated
    communication; the evaluation time is wall-clock. The text says so, and its numbers
    add up."""
    import re

    assert main([*SMALL, "--protocol", "hesv", "--workers", "1", "--schedule", "paper",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "time (wall-clock): training" in out
    work = re.search(r"role work by kind \(s; each role's own clock, summed over every role "
                     r"and every parallel worker\): (.*); sum ([\d.]+)", out)
    assert work is not None
    parts = [float(x.split()[-1]) for x in work.group(1).split(", ")]
    assert sum(parts) == pytest.approx(float(work.group(2)), abs=0.03)
    comm = re.search(r"\+ communication ([\d.]+) s, simulated from the bytes at 1000 Mbit/s "
                     r"= ([\d.]+) s in all\. Not the evaluation's [\d.]+ s of wall-clock", out)
    assert comm is not None
    assert float(work.group(2)) + float(comm.group(1)) == pytest.approx(
        float(comm.group(2)), abs=0.03)
