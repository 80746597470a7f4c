"""The secure Shapley roles' decoders fuzzed: HESV, SecSV, SecretSV (bounded-time version of
the Shapley part of ``benchmarks/fuzz_decoders.py``).

A fixed mutation schedule (one seed per execution) over the messages of one small honest
run of each protocol (:mod:`fuzz_shapley`), and a one-key-at-a-time sweep of every
metadata key of one message per entry point. Only ``ProtocolError`` (and its subclass
``PolicyViolation``; ``FixedPointOverflow`` where a role refuses to wrap) may come out; no
other exception, no warning, no hang, no memory jump; and an accepted message must pass
the target's oracle (Prop. 6.8 for the decrypting client, the server's counts, model
keys, every client's data present once).
"""

from __future__ import annotations

from typing import Any

import pytest
from fuzz_mutations import SWEEP_VALUES
from fuzz_shapley import FLOWER_TARGETS, SHAPLEY_TARGETS, ShapleyWorld, shapley_meta_cases
from fuzz_targets import Target, execute, run

#: Executions of the mutation schedule per target in the suite.
PER_TARGET = 40
#: Sweep values per key in the suite (the long run uses all of them).
SUITE_SWEEP = (None, True, -1, 2**64, 10**300, 1e300, float("nan"), float("inf"), "x",
               [], [None], {}, {"a": 1})


def test_every_shapley_target_is_listed(shapley_targets: dict[str, Target]) -> None:
    assert set(shapley_targets) in (set(SHAPLEY_TARGETS), set(SHAPLEY_TARGETS) - FLOWER_TARGETS)


def test_world_is_honest(shapley_world: ShapleyWorld) -> None:
    """The corpus comes from runs that agree: SecSV and SecretSV mark the same samples
    correct (both are exact), and HESV's counts are theirs."""
    import numpy as np

    for mask in shapley_world.s_eval:
        s_ok = shapley_world.s_eval[mask][1]
        t_ok = shapley_world.t_eval[mask][1]
        np.testing.assert_array_equal(s_ok, t_ok)
        assert shapley_world.h_counts[mask] == int(s_ok.sum())
    # derived decryption: every coalition of the round, exactly per-coalition SecSV's
    # results, from one request per batch
    table = shapley_world.d_table
    assert table.shape == (2 ** len(shapley_world.d_record.rounds[0].participants),
                           sum(len(y) for _, y in shapley_world.sets))
    np.testing.assert_array_equal(table, shapley_world.d_reference)
    assert 0 < table.sum() < table.size  # some right, some wrong: a swap would show
    kinds = [k for _, _, k, _ in shapley_world.d_log.log]
    assert kinds.count("decrypt") == len(shapley_world.d_requests) == 2


@pytest.mark.parametrize("name", SHAPLEY_TARGETS)
def test_shapley_mutation_schedule(shapley_world: ShapleyWorld,
                                   shapley_targets: dict[str, Target], name: str) -> None:
    if name not in shapley_targets:
        pytest.skip("Flower is not installed (fedsec[flower])")
    report = run(shapley_world, [shapley_targets[name]], executions={name: PER_TARGET},
                 seed=8, slow_seconds=10.0)
    stats = report.stats[name]
    lines = [f"{v.target} [{v.producer}] seed {v.seed}: {v.detail}" for v in
             report.violations[:5]]
    assert not report.violations, "\n".join(lines)
    assert stats.executions == PER_TARGET, stats.producer_errors[:3]
    # the schedule reaches past the decoder: some hostile inputs are accepted, some refused
    assert sum(stats.outcomes.get(k, 0) for k in ("ProtocolError", "PolicyViolation",
                                                   "ReplayRefused")) > 0


#: Every (role, message kind) that a HESV, SecSV or SecretSV role decodes from another
#: role's bytes. The mutation schedule must reach each one, and every decoder it reaches
#: must be listed here.
ROLE_KINDS = frozenset({
    *(("HESV server", f"hesv/{k}") for k in ("data", "model", "activated", "predicted",
                                              "count")),
    *(("HESV client", f"hesv/{k}") for k in ("layer", "diff")),
    *(("SecSV client", f"secsv/{k}") for k in ("plan", "decrypt", "decrypt-all")),
    *(("SecSV P", f"secsv/{k}") for k in ("bounds", "data", "model", "product", "reshare",
                                          "labels", "label-diff", "labels-all",
                                          "label-diff-all")),
    *(("SecSV A", f"secsv/{k}") for k in ("plan", "data", "model", "batches", "eval",
                                          "reshare",
                                          "labels", "labels-all", "label-mask")),
    *(("SecretSV client", f"secretsv/{k}") for k in ("session", "output")),
    *(("SecretSV P", f"secretsv/{k}") for k in ("hello", "session", "data", "model",
                                                "triple", "open", "reshare", "labels",
                                                "label-diff")),
    *(("SecretSV A", f"secretsv/{k}") for k in ("session", "data", "model", "batches",
                                                "eval", "triple", "open", "reshare",
                                                "labels", "label-mask")),
    *(("SecretSV dealer", f"secretsv/{k}") for k in ("session", "triple-request")),
})


def _role_of(frame: Any) -> str | None:
    """The Shapley role whose method (or P's fixed-point choice) is on the stack."""
    from fedsec.shapley import hesv, secretsv, secsv

    names = {hesv.HESVServer: "HESV server", hesv.HESVClient: "HESV client",
             secsv.PrincipalServer: "SecSV P", secsv.AuxiliaryServer: "SecSV A",
             secsv.SecSVClient: "SecSV client", secretsv.SecretSVClient: "SecretSV client",
             secretsv.Dealer: "SecretSV dealer"}
    while frame is not None:
        me = frame.f_locals.get("self")
        if isinstance(me, secretsv.SecretSVServer):
            return f"SecretSV {me.name}"
        if type(me) in names:
            return names[type(me)]
        if frame.f_code.co_name in ("_pick_fixed_point", "pick_fixed_point"):
            return "SecSV P"
        frame = frame.f_back
    return None


def test_schedule_reaches_every_role_and_message_kind(
        shapley_world: ShapleyWorld, shapley_targets: dict[str, Target],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every (role, kind) of :data:`ROLE_KINDS` is decoded under the suite's mutation
    schedule, and no role decodes a kind left off the list."""
    import sys

    from fedsec.protocol import wire

    decode = wire.decode
    reached: set[tuple[str, str]] = set()
    unlisted: set[tuple[str, str]] = set()

    def spy(data: Any, *, expect: str | None = None, **kw: Any) -> wire.Message:
        role = _role_of(sys._getframe(1))  # noqa: SLF001
        msg = decode(data, expect=expect, **kw)  # raises for most hostile bytes
        if role is not None and expect is None:
            reached.add((role, msg.kind))
        return msg

    def spy_expect(data: Any, *, expect: str | None = None, **kw: Any) -> wire.Message:
        if expect is not None:
            role = _role_of(sys._getframe(1))  # noqa: SLF001
            if role is not None:
                (reached if (role, expect) in ROLE_KINDS else unlisted).add((role, expect))
        return spy(data, expect=expect, **kw)

    monkeypatch.setattr(wire, "decode", spy_expect)
    run(shapley_world, list(shapley_targets.values()),
        executions={n: PER_TARGET // 2 for n in shapley_targets}, seed=9, slow_seconds=10.0)
    assert not unlisted, f"decoders missing from ROLE_KINDS: {sorted(unlisted)}"
    missing = ROLE_KINDS - reached
    assert not missing, f"(role, kind) pairs the schedule never reaches: {sorted(missing)}"


def _variants(valid: dict[str, Any], values: tuple[Any, ...]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key in sorted(valid):
        out.append((key, {k: v for k, v in valid.items() if k != key}))
        for value in values:
            out.append((key, {**valid, key: value}))
            v = valid[key]
            if isinstance(v, list) and v:
                for i in {0, len(v) - 1}:
                    out.append((key, {**valid, key: [*v[:i], value, *v[i + 1:]]}))
    return out


CASES = ["HESVServer.receive_data", "HESVServer.receive_model", "HESVServer.step[activated]",
         "HESVServer.step[predicted]", "HESVServer.step[count]", "HESVClient.decrypt_layer",
         "HESVClient.count", "SecSVClient.receive_plan", "SecSVClient.decrypt_layer",
         "SecSVClient.decrypt_all", "SecSVClient.decrypt_all[no pair]",
         "SecSVServer.label_diff_all", "SecSVServer.compare_all[labels]",
         "SecSVServer.compare_all[label-diff]",
         "secsv._pick_fixed_point", "SecSVServer.receive_data", "SecSVServer.receive_model",
         "SecretSVServer.receive_data", "SecretSVServer.receive_model",
         "SecretSVServer.open_share", "SecretSVClient.reconstruct",
         "SecSVServer.receive_batches", "SecretSVServer.receive_order",
         "SecretSVServer.gather"]


def test_sweep_values_are_a_subset() -> None:
    assert all(any(v is s or v == s for s in SWEEP_VALUES) or v != v for v in SUITE_SWEEP)


@pytest.mark.parametrize("case", CASES)
def test_shapley_metadata_sweep(shapley_world: ShapleyWorld,
                                shapley_targets: dict[str, Target], case: str) -> None:
    """Every metadata key of one message: dropped, or set to a value of each kind."""
    name, valid, build = shapley_meta_cases(shapley_world)[case]
    target = shapley_targets[name]
    outcome, bad, _ = execute(target, build(valid))
    assert bad is None and outcome == "ok", (outcome, bad)  # the builder is sound
    failures = []
    for key, meta in _variants(valid, SUITE_SWEEP):
        outcome, bad, _ = execute(target, build(meta))
        if bad is not None:
            failures.append(f"{key}={meta.get(key, '<missing>')!r:.60}: {bad.splitlines()[0]}")
    assert not failures, "\n".join(failures[:10])


#: Hypothesis examples per metadata case (several keys changed at once).
META_EXAMPLES = 20


@pytest.mark.parametrize("case", CASES)
def test_shapley_hostile_metadata(shapley_world: ShapleyWorld,
                                  shapley_targets: dict[str, Target], case: str) -> None:
    from fuzz_strategies import hostile_meta
    from hypothesis import HealthCheck, given, settings

    name, valid, build = shapley_meta_cases(shapley_world)[case]
    target = shapley_targets[name]

    @settings(max_examples=META_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(meta=hostile_meta(valid))
    def check(meta: dict) -> None:  # type: ignore[type-arg]
        _, bad, _ = execute(target, build(meta))
        assert bad is None, f"{case} with metadata {meta!r:.300}: {bad}"

    check()
