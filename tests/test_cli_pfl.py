"""``fedsec pfl``: human output, JSON, plots, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fedsec.cli import main  # noqa: E402

SMALL = ["pfl", "--task", "digits", "--samples", "300", "--clients", "6", "--rounds", "2",
         "--malicious", "0.34", "--seed", "1"]


def test_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*SMALL, "--attack", "none,sign-flip", "--method", "balance,fedavg",
                 "--selection", "brute", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["runs"]) == 4
    assert len(doc["malicious"]) == 2
    bal = [r for r in doc["runs"] if r["method"] == "balance"]
    for r in bal:
        assert len(r["accuracy"]) == 2 and len(r["accuracy"][0]) == 6
        assert all(r["accuracy"][t][i] is None for t in range(2) for i in r["malicious"])
        assert r["checks"] == [30, 30] == r["brute_checks"]
        assert len(r["accepted"]) == 2 and len(r["accepted"][1]) == 6
        assert all(i not in s for i, s in enumerate(r["accepted"][0]))
    avg = [r for r in doc["runs"] if r["method"] == "fedavg"]
    assert all(r["checks"] == [] for r in avg)


def test_human_output_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*SMALL, "--attack", "gaussian", "--deployment", "ring", "--plot",
                 str(tmp_path / "figs"), "--graph-round", "1", "--gamma-uniform", "0.1",
                 "0.5"])
    assert code == 0
    cap = capsys.readouterr()
    assert "gaussian" in cap.out and "balance" in cap.out and "12/12" in cap.out
    assert "gamma=per client in [0.1" in cap.out
    assert "round 2/2" in cap.err  # progress on stderr
    for name in ("accuracy.png", "acceptance.png"):
        data = (tmp_path / "figs" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("argv, needle", [
    (["--attack", "bogus"], "--attack"),
    (["--malicious", "0.5"], "--malicious"),
    (["--method", "avg"], "--method"),
    (["--clients", "1"], "--clients"),
])
def test_bad_arguments_exit_2(argv: list[str], needle: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, *argv])
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_attack_without_malicious_clients(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--malicious", "0", "--attack", "ipm"]) == 2
    assert "malicious" in capsys.readouterr().err
    assert main([*SMALL, "--graph-round", "3"]) == 2
    assert main([*SMALL, "--gamma-uniform", "0.5", "0.1"]) == 2


# ----------------------------------------------------------------------------- --secure
SECURE = ["pfl", "--task", "bank", "--samples", "400", "--clients", "6", "--rounds", "2",
          "--malicious", "0.34", "--seed", "2", "--gamma", "0.5", "--secure"]


@pytest.fixture()
def insecure_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line offers 128-bit presets only; the tests swap in the small insecure
    ring behind the option parser (the refusal of --preset INSECURE_* is tested below)."""
    import fedsec.cli.pfl as cli_pfl
    from fedsec.pfl.secure import SecurePFLConfig

    def make(args: object) -> SecurePFLConfig:
        alpha = getattr(args, "sign_alpha", None) or 8
        return SecurePFLConfig(preset="INSECURE_TEST_N4096_DEPTH16", sign_alpha=alpha,
                               allow_insecure=True,
                               comparison=getattr(args, "comparison", None) or "polynomial")
    monkeypatch.setattr(cli_pfl, "_make_secure_config", make)


def test_secure_json(insecure_preset: None, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*SECURE, "--attack", "none,gaussian", "--unclipped-attackers", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in doc["runs"]] == ["balance-secure", "balance"] * 2
    sec = doc["secure"]
    assert sec["sign_alpha"] == 8 and sec["norm_factor"] == 1.25 and sec["norm_bound"] is None
    assert sec["unclipped_attackers"] is True and sec["compare"] is True
    assert sec["key_setup_bytes"] and all(v > 0 for v in sec["key_setup_bytes"].values())
    assert [a["attack"] for a in sec["attacks"]] == ["none", "gaussian"]
    bad = doc["malicious"]
    for a in sec["attacks"]:
        ag = a["agreement"]
        assert ag["pairs"] == 2 * 6 * 5 and ag["outside_band"] == 0
        assert ag["valid_mismatch"] == 0
        assert {"distances", "comparison", "aggregation", "total"} <= set(a["seconds_split"])
        assert a["bytes_per_client"]["up"] > 0 and a["bytes_per_client"]["down"] > 0
        assert len(a["rounds_detail"]) == 2
        assert a["accuracy"]["secure_mean"] == a["accuracy"]["secure_mean"]  # not NaN
    # a Gaussian attacker that skips clipping is far above the bound: invalid every round
    assert all(d["invalid"] == bad for d in sec["attacks"][1]["rounds_detail"])
    assert all(d["invalid"] == [] for d in sec["attacks"][0]["rounds_detail"])


def test_secure_blinded_comparison(insecure_preset: None,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """--comparison blinded reaches the protocol; agreement is judged on its 2^-14 band."""
    code = main([*SECURE, "--attack", "sign-flip", "--comparison", "blinded", "--rounds", "1",
                 "--json"])
    assert code == 0
    sec = json.loads(capsys.readouterr().out)["secure"]
    assert sec["comparison"] == "blinded" and sec["band_log2"] == -14
    (a,) = sec["attacks"]
    assert a["agreement"]["pairs"] == 6 * 5 and a["agreement"]["outside_band"] == 0
    assert a["rounds_detail"][0]["sign_evaluations"] == 0


def test_secure_human(insecure_preset: None, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*SECURE, "--attack", "sign-flip", "--no-compare", "--norm-bound", "50",
                 "--rounds", "1"])
    assert code == 0
    cap = capsys.readouterr()
    assert "balance-secure" in cap.out and "key set-up:" in cap.out
    assert "public norm bound fixed 50" in cap.out and "comparison" in cap.out
    assert "in band" not in cap.out  # --no-compare: no agreement table
    assert "round 1/1" in cap.err


@pytest.mark.parametrize("argv, needle", [
    (["--secure", "--sign-alpha", "16"], "--sign-alpha"),
    (["--secure", "--preset", "INSECURE_TEST_N4096_DEPTH16"], "--preset"),
    (["--secure", "--norm-bound", "1", "--norm-factor", "2"], "--norm-factor"),
    (["--secure", "--norm-factor", "0"], "--norm-factor"),
])
def test_secure_bad_arguments_exit_2(argv: list[str], needle: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, *argv])
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["--secure", "--method", "balance,fedavg"], "--method"),
    (["--secure", "--deployment", "ring"], "--deployment"),
    (["--secure", "--selection", "brute"], "--selection"),
    (["--sign-alpha", "10"], "--secure"),
    (["--unclipped-attackers"], "--secure"),
    (["--comparison", "blinded"], "--secure"),
    (["--secure", "--comparison", "blinded", "--sign-alpha", "10"], "--sign-alpha"),
    (["--secure", "--malicious", "0", "--unclipped-attackers"], "malicious"),
])
def test_secure_refusals(argv: list[str], needle: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedsec: error:") and needle in err
