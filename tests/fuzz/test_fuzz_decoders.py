"""Every decoder and protocol step that reads another role's bytes, fuzzed (issue 8).

Bounded-time version of ``benchmarks/fuzz_decoders.py``: a fixed mutation schedule (one
seed per execution) over valid messages from honest roles, and Hypothesis on the metadata
of one message per target. Only the target's allowed exceptions may come out
(``ProtocolError``; ``TamperingDetected`` at parties), no warning, no hang, no memory jump,
and successes must pass the target's oracle (the right AUC in malicious mode, a bad hello
or commit left out alone).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_mutations import SWEEP_VALUES
from fuzz_strategies import hostile_meta
from fuzz_targets import Case, Target, World, execute, meta_cases, run
from hypothesis import HealthCheck, given, settings

#: Executions of the mutation schedule in `make test`, split by target weight.
IN_SUITE_EXECUTIONS = 2000
MIN_PER_TARGET = 40
#: Hypothesis examples per metadata target.
META_EXAMPLES = 50

TARGETS = [
    "wire.decode", "CKKSContext.from_public_bytes", "CKKSContext.from_secret_bytes",
    "CKKSContext.deserialize", "PartyKeys.from_bytes", "KeySetupParty.from_bytes",
    "KeySetupAggregator.request", "KeySetupParty.offer", "KeySetupAggregator.accept",
    "KeySetupParty.receive", "KeySetupAggregator.confirm", "KeySetupParty.finish",
    "FHAUCAggregator.aggregate", "FHAUCParty.finalize", "MaliciousAggregator.start",
    "MaliciousAggregator.aggregate", "MaliciousParty.submit", "MaliciousParty.finalize",
    "dpauc.parse_submission", "DPAUCServer.aggregate", "DPAUCServer.open_session",
    "DPAUCClient.join", "DPAUCServer.aggregate/session", "flower_io.get_blobs",
    "NodeStore.load",
]


FLOWER = {"flower_io.get_blobs", "NodeStore.load"}  # left out without Flower installed


def test_every_target_is_listed(targets: dict[str, Target]) -> None:
    assert set(targets) in (set(TARGETS), set(TARGETS) - FLOWER)


def _target(targets: dict[str, Target], name: str) -> Target:
    if name not in targets:
        pytest.skip("Flower is not installed (fedsec[flower])")
    return targets[name]


def _share(targets: dict[str, Target], name: str) -> int:
    total = sum(t.weight for t in targets.values())
    return max(MIN_PER_TARGET, round(IN_SUITE_EXECUTIONS * targets[name].weight / total))


def _explain(report_violations: list) -> str:  # type: ignore[type-arg]
    lines = [f"{v.target} [{v.producer}] seed {v.seed}: {v.detail}" for v in
             report_violations[:5]]
    return "\n".join(lines) + ("\n(replay a seed with fuzz_targets.replay)" if lines else "")


@pytest.mark.parametrize("name", TARGETS)
def test_mutation_schedule(world: World, targets: dict[str, Target], name: str) -> None:
    report = run(world, [_target(targets, name)], executions={name: _share(targets, name)},
                 seed=8, slow_seconds=10.0)
    stats = report.stats[name]
    assert not report.violations, _explain(report.violations)
    assert stats.executions >= MIN_PER_TARGET * 0.9, stats.producer_errors[:3]
    assert not stats.producer_errors, stats.producer_errors[:3]


META_TARGETS = sorted(
    ["FHAUCParty.finalize", "FHAUCAggregator.aggregate", "MaliciousParty.finalize",
     "MaliciousAggregator.aggregate", "MaliciousAggregator.start", "MaliciousParty.submit",
     "KeySetupAggregator.request", "KeySetupParty.offer", "KeySetupAggregator.accept",
     "KeySetupParty.receive", "KeySetupAggregator.confirm", "KeySetupParty.finish",
     "CKKSContext.from_public_bytes", "CKKSContext.from_secret_bytes",
     "PartyKeys.from_bytes", "KeySetupParty.from_bytes", "NodeStore.load"])


def _sweep(valid: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each key dropped or set to each sweep value; in a list, its first and last element
    set to each sweep value (same length, so length checks do not hide type checks)."""
    for key in sorted(valid):
        yield key, {k: v for k, v in valid.items() if k != key}
        for value in SWEEP_VALUES:
            yield key, {**valid, key: value}
            v = valid[key]
            if isinstance(v, list) and v:
                for i in {0, len(v) - 1}:
                    yield key, {**valid, key: [*v[:i], value, *v[i + 1:]]}


@pytest.mark.parametrize("name", META_TARGETS)
def test_metadata_sweep(world: World, targets: dict[str, Target], name: str) -> None:
    """Every metadata key, one at a time: dropped, or replaced by a value of each kind
    (None, bool, huge int, 1e300, NaN, infinities, odd strings, lists, dicts, deep)."""
    target = _target(targets, name)
    valid, build, oracle = meta_cases(world)[name]
    failures = []
    for key, meta in _sweep(valid):
        _, bad, _ = execute(target, Case(build(meta), "sweep", oracle))
        if bad is not None:
            failures.append(f"{key}={meta.get(key, '<missing>')!r:.60}: "
                            f"{bad.splitlines()[0]}")
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize("name", META_TARGETS)
def test_hostile_metadata(world: World, targets: dict[str, Target], name: str) -> None:
    target = _target(targets, name)
    valid, build, oracle = meta_cases(world)[name]
    # the honest metadata goes through (the builder is sound)
    outcome, bad, _ = execute(target, Case(build(valid), "valid", oracle))
    assert bad is None and outcome == "ok", (outcome, bad)

    @settings(max_examples=META_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(meta=hostile_meta(valid))
    def check(meta: dict) -> None:  # type: ignore[type-arg]
        outcome, bad, _ = execute(target, Case(build(meta), "hypothesis", oracle))
        assert bad is None, f"{name} with metadata {meta!r:.300}: {bad}"

    check()
