"""`fedsec identity` and `fedsec roster` as a federation's parties run them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsec.cli import main
from fedsec.cli.identity import read_public_entry
from fedsec.crypto.identity import Identity, Roster, fingerprint


def _init(tmp_path: Path, name: str, *extra: str) -> Path:
    out = tmp_path / f"{name}.identity.json"
    assert main(["identity", "init", name, "--out", str(out), *extra]) == 0
    return out


def test_identity_init_writes_a_private_identity_and_a_public_entry(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _init(tmp_path, "hospital-a")
    printed = capsys.readouterr().out
    pub = tmp_path / "hospital-a.pub.json"
    assert (out.stat().st_mode & 0o777) == 0o600
    assert (pub.stat().st_mode & 0o077) != 0o077  # public: readable by others is fine
    ident = Identity.load(out)
    entry = read_public_entry(pub)
    assert entry == ident.entry() and entry.name == "hospital-a"
    assert ident.fingerprint in printed  # the fingerprint to compare out of band
    assert base64.b64encode(ident.public_key).decode() in printed
    private = json.loads(out.read_text())["private_key"]
    assert private not in printed and private not in pub.read_text()


def test_identity_init_refuses_to_overwrite(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = _init(tmp_path, "hospital-a")
    before = out.read_bytes()
    assert main(["identity", "init", "hospital-a", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and str(out) in err
    assert out.read_bytes() == before
    # an existing public entry also stops it, before any file is written
    (tmp_path / "b.pub.json").write_text("{}")
    assert main(["identity", "init", "b", "--out", str(tmp_path / "b.identity.json")]) == 2
    assert not (tmp_path / "b.identity.json").exists()


def test_identity_init_default_paths_and_json(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["identity", "init", "bank-1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["identity_path"] == "bank-1.identity.json"
    assert doc["public_entry_path"] == "bank-1.pub.json"
    assert doc["fingerprint"] == Identity.load("bank-1.identity.json").fingerprint
    assert "private_key" not in doc


@pytest.mark.parametrize("name", ["", "two words", "a|b", "x" * 65, "caf\u00e9"])
def test_identity_init_rejects_bad_names(tmp_path: Path, name: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["identity", "init", name, "--out", str(tmp_path / "x.json")]) == 2
    assert "party name" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_identity_show_never_prints_the_private_key(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    out = _init(tmp_path, "hospital-a")
    capsys.readouterr()
    private = json.loads(out.read_text())["private_key"]
    for path in (out, tmp_path / "hospital-a.pub.json"):
        assert main(["identity", "show", str(path)]) == 0
        shown = capsys.readouterr().out
        assert "hospital-a" in shown and Identity.load(out).fingerprint in shown
        assert private not in shown
    assert main(["identity", "show", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["file"] == "identity" and "private_key" not in doc


def test_identity_show_refuses_an_identity_others_can_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _init(tmp_path, "hospital-a")
    out.chmod(0o644)
    assert main(["identity", "show", str(out)]) == 2
    assert "chmod 600" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("not json", "not a fedsec identity"),
    ('{"fedsec": "identity", "version": 1, "name": "a", "private_key": "AAAA"}', "32 bytes"),
])
def test_identity_show_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 content: str | None, message: str) -> None:
    path = tmp_path / "id.json"
    if content is not None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, content.encode())
        os.close(fd)
    assert main(["identity", "show", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_roster_create_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = ["hospital-a", "hospital-b", "hospital-c"]
    idents = [Identity.load(_init(tmp_path, n)) for n in names]
    capsys.readouterr()
    roster_path = tmp_path / "roster.json"
    entries = [str(tmp_path / f"{n}.pub.json") for n in names]
    assert main(["roster", "create", *entries, "--quorum", "2", "--out",
                 str(roster_path)]) == 0
    created = capsys.readouterr().out
    roster = Roster.load(roster_path)
    assert roster.names == tuple(names) and roster.quorum == 2
    assert roster.digest() == Roster.of(idents, quorum=2).digest()
    for ident in idents:  # every party's fingerprint, and the roster's
        assert ident.fingerprint in created
    assert f"roster fingerprint: {roster.fingerprint}" in created
    assert main(["roster", "show", str(roster_path)]) == 0
    shown = capsys.readouterr().out
    assert f"roster fingerprint: {roster.fingerprint}" in shown and "quorum: 2" in shown
    assert main(["roster", "show", str(roster_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fingerprint"] == roster.fingerprint
    assert [p["fingerprint"] for p in doc["parties"]] == [i.fingerprint for i in idents]
    # never overwritten silently
    assert main(["roster", "create", *entries, "--out", str(roster_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["roster", "create", *entries, "--out", str(roster_path), "--force"]) == 0
    assert Roster.load(roster_path).quorum is None


def test_roster_create_rejects_bad_entries(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    a = _init(tmp_path, "a")
    _init(tmp_path, "b")
    pub_a, pub_b = str(tmp_path / "a.pub.json"), str(tmp_path / "b.pub.json")
    out = str(tmp_path / "roster.json")
    capsys.readouterr()
    cases = [
        ([str(a), pub_b], "PRIVATE identity file"),
        ([pub_a, pub_a], "already taken"),
        ([pub_a], "2..4096 parties"),
        ([pub_a, pub_b, "--quorum", "3"], "--quorum must be in 2..2"),
        ([pub_a, str(tmp_path / "missing.pub.json")], "no such file"),
    ]
    for args, message in cases:
        assert main(["roster", "create", *args, "--out", out]) == 2, args
        assert message in capsys.readouterr().err, args
        assert not Path(out).exists()
    # a public entry whose key was altered no longer matches its stated fingerprint
    doc = json.loads(Path(pub_b).read_text())
    doc["public_key"] = base64.b64encode(Identity("b").public_key).decode()
    Path(pub_b).write_text(json.dumps(doc))
    assert main(["roster", "create", pub_a, pub_b, "--out", out]) == 2
    assert "fingerprint does not match" in capsys.readouterr().err
    # two names with one key
    doc["name"] = "c"
    doc["public_key"] = json.loads(Path(pub_a).read_text())["public_key"]
    doc["fingerprint"] = fingerprint(base64.b64decode(doc["public_key"]))
    Path(pub_b).write_text(json.dumps(doc))
    assert main(["roster", "create", pub_a, pub_b, "--out", out]) == 2
    assert "same public key" in capsys.readouterr().err


def test_roster_show_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "roster.json"
    bad.write_text('{"fedsec": "roster", "version": 1, "parties": [{"name": "a"}]}')
    assert main(["roster", "show", str(bad)]) == 2
    assert "invalid roster" in capsys.readouterr().err


def test_bare_commands_print_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["identity"]) == 2
    assert "init" in capsys.readouterr().err
    assert main(["roster"]) == 2
    assert "create" in capsys.readouterr().err


def test_console_entry_point(tmp_path: Path) -> None:
    """The documented loop, as a shell runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def fedsec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fedsec.cli", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=60,
                              check=False)

    for name in ("p1", "p2"):
        assert fedsec("identity", "init", name).returncode == 0
    res = fedsec("roster", "create", "p1.pub.json", "p2.pub.json", "--out", "roster.json")
    assert res.returncode == 0, res.stderr
    assert Roster.load(tmp_path / "roster.json").fingerprint in res.stdout
    res = fedsec("identity", "init", "p1")
    assert res.returncode == 2 and res.stderr.startswith("fedsec: error:")
    assert "Traceback" not in res.stderr
