"""Secure Priv-PFL's decoders fuzzed (bounded-time version of ``benchmarks/fuzz_decoders.py
--part pfl``).

A fixed mutation schedule (one seed per execution) over the messages of the fixed-holder
key set-up and two honest rounds (:mod:`fuzz_pfl`), a one-key-at-a-time sweep of every
metadata key of one message per entry point, and hypothesis-generated metadata (several
keys changed at once). Only ``ProtocolError`` (``TamperingDetected`` in the key set-up)
may come out; no other exception, warning, hang or memory jump; an accepted hostile
message must pass the target's oracle (honest clients stay valid, no pair revealed twice
or with an invalid client, registered keys are the signed ones, a client's result is its
honest one, no client of the set-up gets the secret key).
"""

from __future__ import annotations

from typing import Any

import pytest
from fuzz_pfl import PFL_TARGETS, PFLWorld, build_pfl_world, make_pfl_targets, pfl_meta_cases
from fuzz_targets import Target, execute, run

#: Executions of the mutation schedule per target in the suite (the long run: thousands).
PER_TARGET = 20
#: Hypothesis examples per metadata case.
META_EXAMPLES = 12
#: Sweep values per key in the suite (the long run uses all of fuzz_mutations.SWEEP_VALUES).
SUITE_SWEEP = (None, True, -1, 2**64, 10**300, 1e300, float("nan"), float("inf"), "x",
               [], {})


@pytest.fixture(scope="module")
def pfl_world() -> PFLWorld:
    return build_pfl_world()


@pytest.fixture(scope="module")
def pfl_targets(pfl_world: PFLWorld) -> dict[str, Target]:
    return {t.name: t for t in make_pfl_targets(pfl_world)}


def test_world_is_honest(pfl_world: PFLWorld) -> None:
    """The corpus is an honest run: client 3 (unclipped, lying about its norm) is the
    only invalid client and keeps its own model; the others got Eq. 2 results."""
    import numpy as np

    for r in pfl_world.a.rounds:
        assert r.valid == [True, True, True, False]
        assert all(3 not in s for s in r.selection.accepted)
    r1 = pfl_world.a.rounds[1]
    np.testing.assert_array_equal(r1.personalised[3], pfl_world.models[1][3])
    assert len(set(PFL_TARGETS)) == 20


@pytest.mark.parametrize("name", PFL_TARGETS)
def test_pfl_mutation_schedule(pfl_world: PFLWorld, pfl_targets: dict[str, Target],
                               name: str) -> None:
    report = run(pfl_world, [pfl_targets[name]], executions={name: PER_TARGET}, seed=5,
                 slow_seconds=10.0)
    stats = report.stats[name]
    lines = [f"{v.target} [{v.producer}] seed {v.seed}: {v.detail}"
             for v in report.violations[:5]]
    assert not report.violations, "\n".join(lines)
    assert stats.executions == PER_TARGET, stats.producer_errors[:3]
    refused = sum(stats.outcomes.get(k, 0) for k in ("ProtocolError", "TamperingDetected"))
    assert refused > 0


def _variants(valid: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key in sorted(valid):
        out.append((key, {k: v for k, v in valid.items() if k != key}))
        for value in SUITE_SWEEP:
            out.append((key, {**valid, key: value}))
            v = valid[key]
            if isinstance(v, list) and v:
                out.append((key, {**valid, key: [value, *v[1:]]}))
    return out


CASES = ["SecurePFLServer.register", "SecurePFLDecryptor.register",
         "SecurePFLClient.receive_decryptor_key", "SecurePFLServer.receive",
         "SecurePFLDecryptor.mask_ciphertexts", "SecurePFLServer.receive_masks",
         "SecurePFLDecryptor.refresh", "SecurePFLServer.compare", "SecurePFLDecryptor.reveal",
         "SecurePFLServer.read_bits", "SecurePFLDecryptor.unmask_for_client",
         "SecurePFLDecryptor.unmask_for_client[own]", "SecurePFLServer.deliver",
         "SecurePFLServer.deliver[own]", "SecurePFLClient.finish",
         "SecurePFLClient.finish[own]"]


def test_meta_cases_are_listed(pfl_world: PFLWorld) -> None:
    assert set(pfl_meta_cases(pfl_world)) == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_pfl_metadata_sweep(pfl_world: PFLWorld, pfl_targets: dict[str, Target],
                            case: str) -> None:
    """Every metadata key of one message: dropped, or set to a value of each kind."""
    name, valid, build = pfl_meta_cases(pfl_world)[case]
    target = pfl_targets[name]
    outcome, bad, _ = execute(target, build(valid))
    assert bad is None and outcome == "ok", (outcome, bad)  # the builder is sound
    failures, refused = [], 0
    for key, meta in _variants(valid):
        outcome, bad, _ = execute(target, build(meta))
        refused += outcome == "ProtocolError"
        if bad is not None:
            failures.append(f"{key}={meta.get(key, '<missing>')!r:.60}: {bad.splitlines()[0]}")
    assert not failures, "\n".join(failures[:10])
    assert refused > 0


@pytest.mark.parametrize("case", CASES)
def test_pfl_hostile_metadata(pfl_world: PFLWorld, pfl_targets: dict[str, Target],
                              case: str) -> None:
    from fuzz_strategies import hostile_meta
    from hypothesis import HealthCheck, given, settings

    name, valid, build = pfl_meta_cases(pfl_world)[case]
    target = pfl_targets[name]

    @settings(max_examples=META_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(meta=hostile_meta(valid))
    def check(meta: dict) -> None:  # type: ignore[type-arg]
        _, bad, _ = execute(target, build(meta))
        assert bad is None, f"{case} with metadata {meta!r:.300}: {bad}"

    check()


#: Every message kind a Priv-PFL role decodes from another role's bytes, and the fuzz
#: target that feeds it hostile bytes.
KIND_TARGETS = {
    "pfl/register": ["SecurePFLServer.register", "SecurePFLDecryptor.register"],
    "pfl/decryptor-key": ["SecurePFLClient.receive_decryptor_key"],
    "pfl/masked-upload": ["SecurePFLServer.receive"],
    "pfl/mask-request": ["SecurePFLDecryptor.mask_ciphertexts"],
    "pfl/masks": ["SecurePFLServer.receive_masks"],
    "pfl/gram": ["SecurePFLDecryptor.refresh"],
    "pfl/refreshed": ["SecurePFLServer.compare"],
    "pfl/reveal": ["SecurePFLDecryptor.reveal"],
    "pfl/bits": ["SecurePFLServer.read_bits"],
    "pfl/result-request": ["SecurePFLDecryptor.unmask_for_client"],
    "pfl/result-box": ["SecurePFLServer.deliver"],
    "pfl/result": ["SecurePFLClient.finish"],
}


def test_every_decoded_kind_is_a_target(pfl_targets: dict[str, Target]) -> None:
    """Each ``wire.decode(..., expect="pfl/...")`` in the protocol has a fuzz target, and
    each is a role method marked ``@receives`` with that kind (and target name); a new
    message kind without one fails here."""
    import re
    from pathlib import Path

    import fedsec.pfl.secure as secure
    from fedsec.protocol.roles import handlers

    source = "".join(p.read_text() for p in Path(secure.__file__).parent.glob("*.py"))
    kinds = set(re.findall(r'expect="(pfl/[a-z-]+)"', source))
    assert kinds == set(KIND_TARGETS)
    marked: dict[str, list[str]] = {}
    for role in (secure.SecurePFLClient, secure.SecurePFLServer, secure.SecurePFLDecryptor):
        for kind, method in handlers(role).items():
            marked.setdefault(kind, []).append(f"{role.__name__}.{method}")
    assert {k: sorted(v) for k, v in marked.items()} == {
        k: sorted(v) for k, v in KIND_TARGETS.items()}
    for names in KIND_TARGETS.values():
        assert all(n in pfl_targets for n in names), names
