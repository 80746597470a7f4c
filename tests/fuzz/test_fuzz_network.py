"""Every protocol fuzzed through its network, from the message kinds it really carries.

For each protocol (``network_worlds.all_protocols()``: key set-up, FHAUC semi-honest,
malicious and exact, DPAUC, HESV, SecSV with and without derived decryption, SecretSV,
Priv-PFL) one honest run on tiny parameters is recorded; every ``(recipient role,
message kind)`` it delivers is a target. Each target is fuzzed by re-running the protocol
with the first such message mutated (``fedsec.testing.netfuzz``): only ``ProtocolError``
(and subclasses) or ``TamperingDetected`` may come out, no warning, and a run that
finishes must pass the protocol's oracle (AUC within its certified bound).

Coverage is checked both ways: every delivered kind is decoded by a role method that says
so (``@receives``), and every ``(role class, kind)`` that any product role declares is
delivered by some honest run. The long run is ``benchmarks/fuzz_decoders.py --part network``.
"""

from __future__ import annotations

import network_worlds as nw
import pytest

from fedsec.protocol.network import Network
from fedsec.protocol.roles import handlers
from fedsec.testing.inventory import role_classes
from fedsec.testing.mutations import Pools
from fedsec.testing.netfuzz import Fuzzable, coverage, fuzz_target, record, targets

#: Mutated runs per target in the suite (the benchmark runs many more).
PER_TARGET = 3

_WORLDS: dict[str, tuple[Fuzzable, Network]] = {}


def _world(name: str) -> tuple[Fuzzable, Network]:
    if name not in _WORLDS:
        f = next(p for p in nw.all_protocols() if p.name == name)
        net, _ = record(f)
        _WORLDS[name] = (f, net)
    return _WORLDS[name]


NAMES = [p.name for p in nw.all_protocols()]


@pytest.mark.parametrize("name", NAMES)
def test_every_delivered_kind_is_declared(name: str) -> None:
    f, net = _world(name)
    extra, _ = coverage(f, net)
    assert not extra, f"{name}: delivered to roles that declare no decoder: {sorted(extra)}"


def test_every_declared_pair_is_delivered_by_some_run() -> None:
    covered: set[tuple[type, str]] = set()
    for name in NAMES:
        f, net = _world(name)
        for role, kind in net.pairs:
            classes = f.roles.get(role, ())
            for cls in classes if isinstance(classes, tuple) else (classes,):
                if kind in handlers(cls):
                    covered.add((cls, kind))
    concrete = list(role_classes(concrete=True).values())
    missing = sorted(f"{c.__qualname__} <- {k}" for c in concrete for k in handlers(c)
                     if not any(issubclass(c, cc) and cc is c and k == kk
                                for cc, kk in covered))
    # a local-only pair (a role reading its own message) is exempt
    local = {(cls.__qualname__, k) for f in nw.all_protocols() for r, k in f.local
             for cls in ((f.roles[r],) if not isinstance(f.roles[r], tuple) else f.roles[r])}
    missing = [m for m in missing if tuple(m.split(" <- ")) not in local]
    assert not missing, f"no honest run delivers: {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_mutated_messages_are_refused_or_harmless(name: str) -> None:
    f, net = _world(name)
    pools = Pools()
    for env in net.transcript:
        pools.add_message(env.payload)
    refused = 0
    found = []
    for target in targets(f, net):
        for seed in range(PER_TARGET):
            out = fuzz_target(f, target, seed, pools)
            assert out.kind != "missed", f"{target.label}: the honest run did not reach it"
            if out.kind == "violation":
                found.append(f"{target.label} seed {seed}: {out.detail}")
            refused += out.kind == "refused"
    assert not found, "\n".join(found[:10])
    assert refused > 0  # the schedule reaches the decoders
