"""A cheating aggregator during key set-up, built from the bytes it relays
(:mod:`fedsec.testing.keysetup`): every attack ends with the party check that stops
it, never with a party holding keys the aggregator knows or keys that differ from its
peers'. Where cheap, the same attack is played against parties that lack the defence, to
show the test can fail."""

from __future__ import annotations

from typing import Any

import pytest

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySpec
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire
from fedsec.testing.keysetup import (
    KEYSETUP_ATTACKS,
    ForgedDelivery,
    KeySetupOutcome,
    KeySetupScene,
    KeySubstitution,
    play,
    run_attack,
)

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
NAMES = ["hospital-a", "hospital-b", "hospital-c", "hospital-d"]
SPEC = KeySpec.create(TEST_PRESET, [8, 16], True, allow_insecure=True)
WHOLE = len(NAMES)  # malicious mode's default quorum: the whole roster


@pytest.fixture(scope="module")
def fed() -> tuple[list[Identity], Roster]:
    ids = [Identity(n) for n in NAMES]
    return ids, Roster.of(ids)


def _run(fed: tuple[list[Identity], Roster], name: str, min_parties: int = WHOLE
         ) -> KeySetupOutcome:
    ids, roster = fed
    return run_attack(name, ids, roster, SPEC, min_parties=min_parties)[1]


def _checks(out: KeySetupOutcome) -> set[str]:
    return set(out.checks().values())


def _safe(out: KeySetupOutcome) -> None:
    assert not out.compromised and not out.split
    for exc in out.raised.values():
        assert isinstance(exc, ProtocolError | TamperingDetected)


def test_honest_relay_completes(fed: tuple[list[Identity], Roster]) -> None:
    ids, roster = fed
    out = play(ids, roster, SPEC, min_parties=WHOLE)
    assert out.kind == "completed" and not out.raised


@pytest.mark.parametrize(("name", "kind", "expect"), [
    # the aggregator's own keys, signed with its own key: the offer signature
    ("forged-delivery", "detected", {"offer-signature"}),
    # ... naming a party that is not the transcript's key holder
    ("forged-delivery-other", "detected", {"holder"}),
    # the victim's hello no longer verifies: the holder refuses before making keys
    ("key-substitution", "detected", {"ProtocolError: the signature of"}),
    # one party sees fewer hellos (below its quorum); the others miss its confirmation
    ("equivocate-hellos", "detected", {"ProtocolError: only 3 parties", "transcript"}),
    # two signed offers from one holder: confirmations disagree (and the holder refuses
    # a delivery of its first offer when it holds the second's keys)
    ("equivocate-offers", "detected", {"transcript", "holder?"}),
    # everyone gets the first offer, the holder holds the second's keys
    ("equivocate-offers-holder", "detected", {"holder", "transcript"}),
    # fresh nonce and X25519 key in each party's own hello
    ("replay-session", "detected", {"own-hello"}),
    ("replay-confirmed", "detected", {"transcript"}),
    ("isolate", "detected", {"ProtocolError: only 1 parties"}),
    ("isolate-replayed-hello", "detected", {"ProtocolError: only 2 parties"}),
    ("drop-party", "detected", {"ProtocolError: only 3 parties"}),
    ("oversized-delivery", "detected", {"ProtocolError: message of"}),
])
def test_keysetup_attack_is_stopped(fed: tuple[list[Identity], Roster], name: str,
                                    kind: str, expect: set[str]) -> None:
    out = _run(fed, name)
    _safe(out)
    assert out.kind == kind and not out.finished
    got = {c if not c.startswith("ProtocolError") else
           next((e for e in expect if c.startswith(e)), c) for c in _checks(out)}
    required = {e for e in expect if not e.endswith("?")}
    optional = {e[:-1] for e in expect if e.endswith("?")}
    assert required <= got <= required | optional


def test_every_registered_attack_is_covered() -> None:
    tested = {"forged-delivery", "forged-delivery-other", "key-substitution",
              "equivocate-hellos", "equivocate-offers", "equivocate-offers-holder",
              "equivocate-confirmed", "replay-session", "replay-confirmed", "isolate",
              "isolate-replayed-hello", "drop-party", "oversized-delivery",
              "request-rotations"}
    assert set(KEYSETUP_ATTACKS) == tested


def test_equivocated_confirmation_stops_its_target_only(
        fed: tuple[list[Identity], Roster]) -> None:
    out = _run(fed, "equivocate-confirmed")
    _safe(out)
    assert out.kind == "partial" and out.checks() == {NAMES[-1]: "transcript"}
    assert sorted(out.finished) == NAMES[:-1]


def test_request_cannot_choose_the_keys(fed: tuple[list[Identity], Roster]) -> None:
    """A request asking for 200 rotations: the holder makes its own spec's keys."""
    out = _run(fed, "request-rotations")
    assert out.kind == "completed" and out.public is not None
    assert out.public.rotations == SPEC.rotations and SPEC.matches(out.public)


# ------------------------------------------------------------ without the defence
def test_loosened_quorum_lets_the_aggregator_drop_or_isolate(
        fed: tuple[list[Identity], Roster]) -> None:
    """Only the party's quorum stops these two: with min_parties=2 the set-up goes on
    without the dropped party, and an isolated party is stopped by the confirmation
    round only (the replayed party cannot confirm the new transcript)."""
    out = _run(fed, "drop-party", min_parties=2)
    _safe(out)
    assert out.kind == "partial" and sorted(out.finished) == NAMES[:-1]
    iso = _run(fed, "isolate-replayed-hello", min_parties=2)
    _safe(iso)
    assert iso.kind == "detected" and _checks(iso) == {"transcript"}


def test_equivocated_offers_pass_every_check_but_the_confirmations(
        fed: tuple[list[Identity], Roster]) -> None:
    """Without the confirmation round, half of the parties would hold other keys: every
    party accepted its delivery (receive) and only finish() refused."""
    ids, roster = fed
    att = KEYSETUP_ATTACKS["equivocate-offers"]()
    scene_keys: list[Any] = []

    class Spy(type(att)):  # type: ignore[misc]
        def confirmed(self, scene: KeySetupScene, agg: KeySetupAggregator,
                      confirms: dict[str, bytes]) -> dict[str, bytes]:
            scene_keys.extend(p._pending for p in scene.parties.values()
                              if p._pending is not None)
            return super().confirmed(scene, agg, confirms)

    out = play(ids, roster, SPEC, Spy("half"), min_parties=WHOLE)
    assert out.kind == "detected" and "transcript" in _checks(out)
    # every non-holder accepted its delivery; two transcripts were accepted by receive()
    assert len(scene_keys) >= len(NAMES) - 1
    assert len({k.session for k in scene_keys}) == 2


class _ForgeConfirmations:
    """Mix-in: relay a made-up confirmation for every party that sent none (only a party
    that does not verify signatures would accept it)."""

    def confirmed(self, scene: KeySetupScene, agg: KeySetupAggregator,
                  confirms: dict[str, bytes]) -> dict[str, bytes]:
        if not confirms:
            return {}
        final = wire.decode(next(iter(confirms.values()))).blobs[0]
        full = {n: confirms.get(n) or wire.encode("keys/confirm", {"name": n},
                                                   [final, b"\x00" * 64])
                for n in agg.names}
        bundle = wire.encode("keys/confirmed", {}, [full[n] for n in agg.names])
        return {n: bundle for n in confirms}


class _ForgedNoCheck(_ForgeConfirmations, ForgedDelivery):
    pass


class _SubstitutionNoCheck(_ForgeConfirmations, KeySubstitution):
    pass


@pytest.mark.parametrize("attack", [_ForgedNoCheck, _SubstitutionNoCheck])
def test_signatures_are_what_stops_forgery_and_substitution(
        fed: tuple[list[Identity], Roster], monkeypatch: pytest.MonkeyPatch,
        attack: type) -> None:
    """Parties that skip signature checks (Roster.verify patched to accept anything)
    end up with a secret key and seed the aggregator holds."""
    ids, roster = fed
    monkeypatch.setattr(Roster, "verify", lambda *_a, **_k: None)
    out = play(ids, roster, SPEC, attack(), min_parties=WHOLE)
    assert out.compromised and out.kind == "compromised"
    assert len(out.finished) >= len(NAMES) - 1
