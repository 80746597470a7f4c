"""Identities and rosters: files, permissions, round trips, signatures, bad input."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from fedsec.crypto.identity import (
    Identity,
    Roster,
    RosterEntry,
    check_party_name,
    fingerprint,
)
from fedsec.errors import ProtocolError


@pytest.fixture(scope="module")
def trio() -> list[Identity]:
    return [Identity(n) for n in ("hospital-a", "hospital-b", "hospital-c")]


# ------------------------------------------------------------------------ identity
def test_identity_file_is_private_and_round_trips(tmp_path: Path) -> None:
    ident = Identity("hospital-a")
    path = ident.save(tmp_path / "a.id")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = Identity.load(path)
    assert again.name == "hospital-a" and again.public_key == ident.public_key
    assert again.fingerprint == ident.fingerprint
    # the loaded key signs what the roster verifies
    roster = Roster.of([ident, Identity("hospital-b")])
    roster.verify("hospital-a", "test", b"payload", again.sign("test", b"payload"))


def test_identity_save_refuses_to_overwrite(tmp_path: Path) -> None:
    path = Identity("a").save(tmp_path / "a.id")
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        Identity("a").save(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o700 | 0o004])
def test_identity_load_refuses_files_others_can_read(tmp_path: Path, mode: int) -> None:
    path = Identity("a").save(tmp_path / "a.id")
    os.chmod(path, mode)
    with pytest.raises(PermissionError, match="chmod 600"):
        Identity.load(path)


@pytest.mark.parametrize("text", [
    "not json",
    "[]",
    json.dumps({"fedsec": "roster", "version": 1, "name": "a", "private_key": "AAAA"}),
    json.dumps({"fedsec": "identity", "version": 2, "name": "a", "private_key": "AAAA"}),
    json.dumps({"fedsec": "identity", "version": 1, "name": "a"}),
    json.dumps({"fedsec": "identity", "version": 1, "name": "a", "private_key": "!!"}),
    json.dumps({"fedsec": "identity", "version": 1, "name": "a",
                "private_key": "AAAA"}),                     # 3 bytes, not 32
    json.dumps({"fedsec": "identity", "version": 1, "name": "bad name",
                "private_key": "A" * 43 + "="}),
    json.dumps({"fedsec": "identity", "version": 1, "name": 7,
                "private_key": "A" * 43 + "="}),
])
def test_identity_bad_files_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="invalid identity file"):
        Identity.from_json(text)


@pytest.mark.parametrize("name", ["", "a b", "a|b", "x" * 65, "caf\u00e9", "tab\t", "nl\n"])
def test_party_names_are_checked(name: str) -> None:
    with pytest.raises(ValueError, match="party name"):
        check_party_name(name)
    with pytest.raises(TypeError):
        check_party_name(3)


def test_signatures_are_domain_separated(trio: list[Identity]) -> None:
    roster = Roster.of(trio)
    sig = trio[0].sign("keys/hello", b"m")
    roster.verify("hospital-a", "keys/hello", b"m", sig)
    with pytest.raises(ProtocolError, match="does not verify"):
        roster.verify("hospital-a", "keys/confirm", b"m", sig)      # other purpose
    with pytest.raises(ProtocolError, match="does not verify"):
        roster.verify("hospital-b", "keys/hello", b"m", sig)       # other party
    with pytest.raises(ProtocolError, match="does not verify"):
        roster.verify("hospital-a", "keys/hello", b"m2", sig)      # other payload
    with pytest.raises(ProtocolError, match="not on the roster"):
        roster.verify("mallory", "keys/hello", b"m", sig)
    with pytest.raises(ProtocolError, match="malformed"):
        roster.verify("hospital-a", "keys/hello", b"m", sig[:63])


# -------------------------------------------------------------------------- roster
def test_roster_round_trips_through_its_file(tmp_path: Path, trio: list[Identity]) -> None:
    roster = Roster.of(trio, quorum=2)
    again = Roster.load(roster.save(tmp_path / "roster.json"))
    assert again.names == roster.names and again.quorum == 2
    assert again.digest() == roster.digest() and again.fingerprint == roster.fingerprint
    assert [e.public_key for e in again.entries] == [i.public_key for i in trio]
    assert Roster.of(trio).digest() != roster.digest()  # the quorum is part of the digest
    assert len(roster.fingerprint.split(":")) == 16
    assert trio[0].entry().fingerprint == fingerprint(trio[0].public_key)


def test_roster_order_and_lookups(trio: list[Identity]) -> None:
    roster = Roster.of(trio)
    assert roster.order(["hospital-c", "hospital-a"]) == ["hospital-a", "hospital-c"]
    assert "hospital-b" in roster and "mallory" not in roster and len(roster) == 3
    assert roster.public_key("hospital-b") == trio[1].public_key
    with pytest.raises(ProtocolError):
        roster.index("mallory")


def test_roster_rejects_bad_memberships(trio: list[Identity]) -> None:
    a, b, _ = trio
    with pytest.raises(ValueError, match="2.."):
        Roster.of([a])
    with pytest.raises(ValueError, match="unique"):
        Roster([a.entry(), RosterEntry("hospital-a", b.public_key)])
    with pytest.raises(ValueError, match="share one public key"):
        Roster([a.entry(), RosterEntry("other", a.public_key)])
    for q in (1, 4, True, "2"):
        with pytest.raises(ValueError, match="quorum"):
            Roster.of(trio, quorum=q)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="32 bytes"):
        RosterEntry("x", b"\x00" * 31)


@pytest.mark.parametrize("obj", [
    {"fedsec": "identity", "version": 1, "parties": []},
    {"fedsec": "roster", "version": 9, "parties": []},
    {"fedsec": "roster", "version": 1, "parties": "a"},
    {"fedsec": "roster", "version": 1, "parties": [1, 2]},
    {"fedsec": "roster", "version": 1, "parties": [{"name": "a"}]},
    {"fedsec": "roster", "version": 1,
     "parties": [{"name": "a", "public_key": "AAAA"}, {"name": "b", "public_key": "AAAB"}]},
])
def test_bad_roster_files_raise_value_error(obj: object) -> None:
    with pytest.raises(ValueError, match="invalid roster"):
        Roster.from_json(json.dumps(obj))
    with pytest.raises(ValueError, match="invalid roster"):
        Roster.from_json("{not json")
