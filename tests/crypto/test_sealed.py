"""Sealed messages through a relay: the relay cannot read, forge, redirect or replay."""

from __future__ import annotations

import pytest

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.sealed import SealKey, announce, read_announcement, seal, unseal
from fedsec.errors import ProtocolError

CTX = b"session=ab12|protocol=demo|round=0|step=ask"


@pytest.fixture()
def fed() -> tuple[dict[str, Identity], Roster, dict[str, SealKey]]:
    ids = {n: Identity.generate(n) for n in ("alice", "bob", "relay")}
    return ids, Roster.of(list(ids.values())), {n: SealKey.generate() for n in ids}


def test_round_trip_and_announcement(fed):
    ids, roster, keys = fed
    ann = announce(ids["bob"], keys["bob"], context=b"run-1")
    bob_pub = read_announcement(roster, "bob", ann, context=b"run-1")
    assert bob_pub == keys["bob"].public
    box = seal(ids["alice"], "bob", bob_pub, b"secret shares", context=CTX)
    assert b"secret shares" not in box
    assert unseal(keys["bob"], roster, "alice", "bob", box, context=CTX) == b"secret shares"
    # a seal key survives its node-local state file
    again = SealKey.from_bytes(keys["bob"].to_bytes())
    assert unseal(again, roster, "alice", "bob", box, context=CTX) == b"secret shares"


def test_relay_cannot_substitute_a_key(fed):
    ids, roster, keys = fed
    ann = announce(ids["bob"], keys["bob"], context=b"run-1")
    forged = ann[:-96] + keys["relay"].public + ann[-64:]
    with pytest.raises(ProtocolError):
        read_announcement(roster, "bob", forged, context=b"run-1")
    # the relay's own announcement is not bob's, and bob's is not for another run
    with pytest.raises(ProtocolError):
        read_announcement(roster, "bob", announce(ids["relay"], keys["relay"],
                                                  context=b"run-1"), context=b"run-1")
    with pytest.raises(ProtocolError):
        read_announcement(roster, "bob", ann, context=b"run-2")


def test_relay_cannot_read_forge_redirect_or_replay(fed):
    ids, roster, keys = fed
    box = seal(ids["alice"], "bob", keys["bob"].public, b"payload", context=CTX)
    # read: the relay's key does not open it
    with pytest.raises(ProtocolError):
        unseal(keys["relay"], roster, "alice", "relay", box, context=CTX)
    # forge: the relay signs its own box as itself, or flips a byte of alice's
    own = seal(ids["relay"], "bob", keys["bob"].public, b"forged", context=CTX)
    with pytest.raises(ProtocolError):
        unseal(keys["bob"], roster, "alice", "bob", own, context=CTX)
    for i in (10, len(box) // 2, len(box) - 70, len(box) - 1):
        bad = bytearray(box)
        bad[i] ^= 1
        with pytest.raises(ProtocolError):
            unseal(keys["bob"], roster, "alice", "bob", bytes(bad), context=CTX)
    # replay into another step, round or session
    for other in (CTX.replace(b"ask", b"tell"), CTX.replace(b"round=0", b"round=1"),
                  CTX.replace(b"ab12", b"ab13")):
        with pytest.raises(ProtocolError):
            unseal(keys["bob"], roster, "alice", "bob", box, context=other)
    # redirect: bob's box claimed for alice
    with pytest.raises(ProtocolError):
        unseal(keys["alice"], roster, "alice", "alice", box, context=CTX)
    # truncations and junk
    for cut in (0, 3, 8, 40, len(box) - 1):
        with pytest.raises(ProtocolError):
            unseal(keys["bob"], roster, "alice", "bob", box[:cut], context=CTX)
    with pytest.raises(ProtocolError):
        unseal(keys["bob"], roster, "alice", "bob", b"FSB1" + b"\xff" * 200, context=CTX)
