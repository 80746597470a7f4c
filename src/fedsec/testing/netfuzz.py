"""Fuzzing every protocol through its network, with no per-protocol fuzz code.

A protocol is fuzzed as a whole run on small parameters (:class:`Fuzzable`: a function that
runs every role in this process over a given :class:`~fedsec.protocol.network.Network`).
One honest run, recorded, gives the **targets**: every ``(recipient role, message kind)``
that crossed the network. For each target and seed, the run is repeated with an
interceptor that rewrites the first message of that kind to that role (the structure-aware
:class:`~fedsec.testing.mutations.Mutator`: framing, metadata, blobs, SEAL objects, replays
from a pool of every message of the honest run) and the outcome is classified:

* **refused** -- an allowed exception (``ProtocolError`` and its subclasses,
  ``TamperingDetected``; a protocol may add its own): the contract;
* **accepted** -- the run finished (the mutation was harmless, e.g. a reordered JSON key,
  or a value the receiver may accept); the protocol's ``oracle`` may still reject the
  result (a wrong result accepted is a violation);
* **violation** -- any other exception, a warning, or a rejected result.

The targets are generated from what the network carried, and checked against what the role
classes declare (:func:`fedsec.protocol.roles.handlers`): a kind a role declares but no
honest run delivers, or one delivered to a role that does not declare it, is reported.
"""

from __future__ import annotations

import random
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol.network import Envelope, Network, role_kind
from fedsec.protocol.roles import handlers
from fedsec.testing.mutations import Mutator, Pools

__all__ = ["Fuzzable", "Target", "Outcome", "Report", "record", "targets", "declared", "coverage",
           "MutateFirst", "fuzz_target", "fuzz"]

Pair = tuple[str, str]


@dataclass
class Fuzzable:
    """A protocol that can be run whole, in this process, over a given network.

    ``run(net)`` runs every role on small parameters and returns the result;
    ``roles`` maps each role kind (the part of a role name before ``:``) to its class or
    classes (a party may play the key set-up and the protocol), whose ``@receives`` marks
    say which kinds it decodes; ``allowed`` are the exceptions
    a refusal may raise; ``oracle(result)`` returns ``None`` for an acceptable result of a
    run with a mutated message, or a reason it is not.
    """

    name: str
    run: Callable[[Network], Any]
    roles: Mapping[str, type | tuple[type, ...]]
    allowed: tuple[type[BaseException], ...] = (ProtocolError, TamperingDetected)
    oracle: Callable[[Any], str | None] | None = None
    #: Kinds delivered to a role that does not decode them (a relay forwards them; the
    #: next hop is the target), excluded from the targets.
    unread: frozenset[Pair] = frozenset()
    #: Kinds a role decodes that never cross the network (a role reads its own message).
    local: frozenset[Pair] = frozenset()


@dataclass(frozen=True)
class Target:
    protocol: str
    role: str
    kind: str

    @property
    def label(self) -> str:
        return f"{self.protocol}: {self.role} <- {self.kind}"


@dataclass
class Outcome:
    kind: str  # "refused", "accepted", "violation", "missed"
    detail: str = ""


@dataclass
class Report:
    executions: Counter[Target] = field(default_factory=Counter)
    outcomes: dict[Target, Counter[str]] = field(default_factory=dict)
    violations: list[tuple[Target, int, str]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, target: Target, seed: int, outcome: Outcome) -> None:
        self.executions[target] += 1
        self.outcomes.setdefault(target, Counter())[outcome.kind if outcome.kind != "refused"
                                                    else outcome.detail] += 1
        if outcome.kind == "violation":
            self.violations.append((target, seed, outcome.detail))

    @property
    def total(self) -> int:
        return sum(self.executions.values())


def record(protocol: Fuzzable) -> tuple[Network, Any]:
    """One honest run, recorded."""
    net = Network(record=True)
    result = protocol.run(net)
    return net, result


def declared(protocol: Fuzzable) -> set[Pair]:
    """Every ``(role kind, message kind)`` the protocol's role classes declare."""
    out: set[Pair] = set()
    for role, classes in protocol.roles.items():
        for cls in classes if isinstance(classes, tuple) else (classes,):
            out.update((role, kind) for kind in handlers(cls))
    return out


def coverage(protocol: Fuzzable, net: Network) -> tuple[set[Pair], set[Pair]]:
    """What a recorded honest run delivered that no role declares, and what the roles
    declare that it never delivered (both should be empty)."""
    got = {p for p in net.pairs if p not in protocol.unread}
    want = declared(protocol) - set(protocol.local)
    return got - want, want - got


def targets(protocol: Fuzzable, net: Network) -> list[Target]:
    """The fuzz targets of a recorded honest run: every pair the network delivered and a
    role decodes, sorted."""
    seen = {p for p in net.pairs if p not in protocol.unread}
    return [Target(protocol.name, r, k) for r, k in sorted(seen)]


class MutateFirst:
    """An interceptor that rewrites the first message of ``target`` (all copies of it in
    that delivery: a broadcast is equivocated, a gathered batch has one bad member)."""

    def __init__(self, target: Target, mutator: Mutator, *, which: int = 0) -> None:
        self.target = target
        self.mutator = mutator
        self.which = which
        self.hits = 0

    def __call__(self, batch: list[Envelope]) -> list[Envelope]:
        out = []
        for env in batch:
            if (self.hits <= self.which and role_kind(env.recipient) == self.target.role
                    and env.kind == self.target.kind):
                if self.hits == self.which:
                    env = env.with_payload(self.mutator.mutate_many(env.payload))
                self.hits += 1
            out.append(env)
        return out


def _pools(net: Network) -> Pools:
    pools = Pools()
    for env in net.transcript:
        pools.add_message(env.payload)
    return pools


def fuzz_target(protocol: Fuzzable, target: Target, seed: int, pools: Pools) -> Outcome:
    """Run the protocol once with the first ``target`` message mutated (seed ``seed``)."""
    mutator = Mutator(random.Random(f"{target.label}/{seed}"), pools)  # noqa: S311 - fuzzing
    net = Network()
    hook = MutateFirst(target, mutator)
    net.intercept(hook)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            result = protocol.run(net)
        except protocol.allowed as exc:
            return Outcome("refused", type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - classifying is the point
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            return Outcome("violation", f"{type(exc).__name__}: {exc} "
                                        f"({tb.filename.rsplit('/', 1)[-1]}:{tb.lineno})")
    if hook.hits == 0:
        return Outcome("missed", "the run did not deliver the target")
    if protocol.oracle is not None:
        why = protocol.oracle(result)
        if why is not None:
            return Outcome("violation", f"accepted a wrong result: {why}")
    return Outcome("accepted")


def fuzz(protocols: Sequence[Fuzzable], *, executions: int, seed: int = 0,
         only: Callable[[Target], bool] | None = None,
         progress: Callable[[str], None] | None = None,
         minutes: float | None = None) -> Report:
    """``executions`` mutated runs per target of every protocol (seeds ``seed``,
    ``seed + 1``, ...); stops early after ``minutes`` if given."""
    report = Report()
    t0 = time.perf_counter()
    for protocol in protocols:
        net, _ = record(protocol)
        pools = _pools(net)
        for target in targets(protocol, net):
            if only is not None and not only(target):
                continue
            for s in range(seed, seed + executions):
                if minutes is not None and time.perf_counter() - t0 > 60 * minutes:
                    report.seconds = time.perf_counter() - t0
                    return report
                report.add(target, s, fuzz_target(protocol, target, s, pools))
            if progress is not None:
                progress(f"{target.label}: {dict(report.outcomes[target])}")
    report.seconds = time.perf_counter() - t0
    return report
