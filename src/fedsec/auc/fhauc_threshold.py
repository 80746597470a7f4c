"""FHAUC with no single key holder: the semi-honest protocol over collective keys.

Every party holds a share of the key its statistics are encrypted under
(:mod:`fedsec.crypto.collective`); the key exists nowhere. The aggregator computes as in
:mod:`fedsec.auc.fhauc`, but it cannot have the result decrypted by asking: each party
contributes a key-switch share only for the ciphertexts **it has recomputed itself** from
the signed submissions of every included party. The switch moves the aggregate ``Q`` (the
squared class sums, before any mask) from the collective key to the *result key* that every
party holds; the aggregator, which does not hold it, then masks ``Q`` exactly as in
single-key mode, and each party decrypts the masked result on its own.

Roles: :class:`ThresholdFHAUCParty` (``"party:<name>"``) sends ``fhauc-t/submit`` (signed)
and ``fhauc-t/share``; :class:`ThresholdFHAUCAggregator` sends ``fhauc-t/switch`` (every
included submission, as received) and ``fhauc-t/result`` to every party.

What a party checks before it contributes a share: every relayed submission carries its
sender's signature over this evaluation's session, each included party appears once, this
party's own submission is there unchanged, and the participants reach its policy's quorum.
It then adds the submissions, squares, conjugates and rotates with the collective public
keys - SEAL's evaluator is deterministic - and computes its shares of *its own*
ciphertexts. An aggregator that asks for anything else (a party's submission, a ciphertext
of its choosing, the aggregate without a party) obtains shares of the genuine aggregate or
nothing.

What each coalition learns: the aggregator with every party but one holds every key share
but one, the result key and every decryption share; what it can decrypt is the genuine
aggregate ``Q`` plus the honest party's smudging - the unmasked result a colluding party
could already compute with the aggregator's masks - and nothing of a submission or of the
honest party's key share beyond it (``docs/protocols/secure-auc.md``, threshold keys).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedsec.auc.common import (
    AGGREGATOR,
    SecureAUCResult,
    bytes_per_party,
    check_bound,
    evaluation_binding,
    local_federation,
    party_index,
    party_role,
    prepare_federation,
)
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty, combine_sums
from fedsec.auc.fhauc_malicious import (
    DEFAULT_RUNS,
    DEFAULT_TOLERANCE,
    MaliciousAggregator,
    MaliciousConfig,
    MaliciousParty,
    combine_runs,
)
from fedsec.auc.policy import (
    DEFAULT_MAX_DECISION_POINTS,
    DEFAULT_MAX_TOLERANCE,
    DEFAULT_MIN_BOUND_BITS,
    DEFAULT_MIN_DECISION_POINTS,
    IN_PROCESS_MAX_KEY_BYTES,
    PartyPolicy,
)
from fedsec.crypto import multiparty as mpc
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.collective import CollectiveKeys, run_collective_key_setup
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySpec, PartyKeys, VerificationCache, run_key_setup
from fedsec.crypto.params import THRESHOLD_PRESET as _THRESHOLD_PRESET
from fedsec.crypto.params import CKKSParams
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire
from fedsec.protocol.binding import BROADCAST
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives

__all__ = ["ThresholdFHAUCParty", "ThresholdFHAUCAggregator", "secure_auc_threshold",
           "ThresholdMaliciousParty", "ThresholdMaliciousAggregator",
           "secure_auc_threshold_malicious",
           "switch_smudging_bits", "THRESHOLD_PRESET", "PROTOCOL", "RESULT_ERROR_BITS"]

PROTOCOL = "fhauc-t"
#: The default preset of threshold mode: a 2^14 ring with a 2^60 fresh scale, so that the
#: key switch's smudging can be about 2^40 times the aggregate's noise (times the ring
#: degree) while the AUC keeps 1e-9.
THRESHOLD_PRESET = _THRESHOLD_PRESET
#: The switch's smudging is sized so that six standard deviations of its decoded error stay
#: below ``2^-RESULT_ERROR_BITS`` on the squared counts (``num`` and ``denom``).
RESULT_ERROR_BITS = 20
_SIG_SUBMIT = "fedsec/fhauc-t/submit"
_SHARES_PER_PARTY = 2


def switch_smudging_bits(params: CKKSParams, n_parties: int) -> int:
    """The key switch's smudging ``k`` (each party draws uniform ``[-2^k, 2^k]`` per
    coefficient): the largest ``k`` whose summed, decoded error keeps six standard
    deviations below ``2^-RESULT_ERROR_BITS`` at the aggregate's scale ``s^2``."""
    n = params.poly_modulus_degree
    sd_bits = 0.5 * math.log2(max(n_parties, 1) / 3.0) + 0.5 * math.log2(n / 2.0)
    return int(math.floor(2 * params.scale_bits - RESULT_ERROR_BITS - math.log2(6.0)
                          - sd_bits))


def _submission_payload(session: str, name: str, blobs: Sequence[bytes]) -> bytes:
    h = hashlib.sha256()
    for part in (session.encode(), name.encode(), *[bytes(b) for b in blobs]):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


class ThresholdFHAUCParty(FHAUCParty):
    """An input party holding only a share of the key its statistics are encrypted under.

    Parameters
    ----------
    y_true, y_score : array-like
        This party's private labels and scores.
    keys : CollectiveKeys
        From :func:`fedsec.crypto.collective.run_collective_key_setup`.
    identity : Identity
        This party's signing identity (signs its submission).
    config : FHAUCConfig
    policy : PartyPolicy, optional
    roster : Roster
        The federation's identities: every relayed submission's signature is checked.
    """

    def __init__(self, y_true: ArrayLike, y_score: ArrayLike, *, keys: CollectiveKeys,
                 identity: Identity, config: FHAUCConfig, roster: Roster,
                 policy: PartyPolicy | None = None) -> None:
        if identity.name != keys.name:
            raise ValueError("the identity and the keys name different parties")
        if keys.context.params.name != config.preset:
            raise ValueError("the collective keys and the configuration use different "
                             "presets")
        super().__init__(y_true, y_score, keys=keys.result, config=config, policy=policy,
                         roster=roster)
        self._ck = keys
        self._id = identity
        self._roster_t = roster
        self._binding = evaluation_binding(keys.session, config.digest(), PROTOCOL,
                                           self._role)
        self._own: bytes = b""
        self._switched: list[int] | None = None
        self._smudging_bits = switch_smudging_bits(keys.context.params, keys.n_parties)

    @property
    def switched(self) -> list[int] | None:
        """The parties this party's key-switch shares covered (``None`` before
        :meth:`share`)."""
        return None if self._switched is None else list(self._switched)

    def restore(self, submission: bytes, switched: Sequence[int] | None = None) -> None:
        """Re-enter the state after :meth:`submit` (and after :meth:`share`, with the
        parties it covered) for a stateless runtime, which must itself remember that the
        shares were sent (a second request is refused only within one object)."""
        if not isinstance(submission, bytes) or not submission:
            raise ValueError("The 'submission' parameter of restore must be this party's "
                             "own submission bytes.")
        self._own = submission
        self._switched = None if switched is None else sorted(int(i) for i in switched)

    @property
    def smudging_bits(self) -> int:
        """The key switch's smudging (:func:`switch_smudging_bits`)."""
        return self._smudging_bits

    def submit(self) -> bytes:
        """Encrypt the slot vectors under the collective public key and sign them."""
        ctx = self._ck.context
        with self.clock("encryption"):
            blobs = [ctx.serialize(ctx.encrypt(v)) for v in self.slot_vectors()]
        sig = self._id.sign(_SIG_SUBMIT, _submission_payload(self._binding.session,
                                                             self._ck.name, blobs))
        meta = self._binding.bind({"party": self._ck.index, "chunks": len(blobs)},
                                  step="submit", to=AGGREGATOR)
        self._own = wire.encode("fhauc-t/submit", meta, [*blobs, sig])
        return self._own

    @receives("fhauc-t/switch")
    def share(self, request: bytes) -> bytes:
        """Check every relayed submission, recompute the aggregate and return this
        party's key-switch shares of it (to the result key)."""
        if not self._own:
            raise ProtocolError("a key-switch request before this party submitted")
        if self._switched is not None:
            # one share per evaluation: repeated shares of one ciphertext would let their
            # smudging be averaged away
            raise ProtocolError("this party already sent its key-switch shares for this "
                                "evaluation")
        msg = wire.decode(request, expect="fhauc-t/switch",
                          max_bytes=self._policy.max_message_bytes)
        check_bound(self._binding, msg.meta, step="switch", sender=AGGREGATOR,
                    broadcast=True, what="the key-switch request")
        ck = self._ck
        n = ck.n_parties
        included: list[int] = []
        ctx = ck.context
        chunks = self._config.n_chunks
        sums: list[Any] = [None] * chunks
        with self.clock("other"):
            for raw in msg.blobs:
                sub = _check_submission(raw, self._binding.session, self._config,
                                        ck.names, self._roster_t, n)
                idx, cts = sub
                if idx in included:
                    raise ProtocolError("a party's submission appears twice")
                if idx == ck.index and raw != self._own:
                    raise ProtocolError("this party's submission was changed")
                included.append(idx)
                for c, blob in enumerate(cts):
                    ct = ctx.deserialize(blob, at_top=True, scale=ctx.scale)
                    sums[c] = ct if sums[c] is None else ctx.add(sums[c], ct)
            if ck.index not in included:
                raise ProtocolError("the key-switch request leaves out this party's "
                                    "submission")
            self._policy.check_participants(len(included), "semi-honest", n,
                                            self._roster_t)
        with self.clock("arithmetic"):
            q, rot = combine_sums(ctx, sums)
        target = ck.result_share() if ck.index == min(included) else None
        with self.clock("decryption"):
            shares = [ck.share.switch_share(ct, target, smudging=self._smudging_bits)
                      for ct in (q, rot)]
        self._switched = sorted(included)
        meta = self._binding.bind({"party": ck.index, "parties": self._switched},
                                  step="share", to=AGGREGATOR)
        return wire.encode("fhauc-t/share", meta, shares)

    @receives("fhauc-t/result")
    def finalize(self, response: bytes) -> float:
        """Decrypt the masked result (under the result key) and return the global AUC."""
        if self._switched is None:
            raise ProtocolError("a result before this party's key switch")
        return self._finalize(response, "fhauc-t/result", expect_parties=self._switched)


def _check_submission(raw: bytes, session: str, config: Any, names: Sequence[str],
                      roster: Roster, n: int, *, kind: str = "fhauc-t/submit",
                      protocol: str = PROTOCOL) -> tuple[int, list[bytes]]:
    """A relayed submission: its index and ciphertext bytes, once its binding and its
    sender's signature check."""
    from fedsec.protocol.binding import Binding, ReplayRefused

    msg = wire.decode(raw, expect=kind)
    idx = party_index(msg.meta, n)
    try:
        Binding(session, protocol, AGGREGATOR).check(
            msg.meta, step="submit", sender=party_role(names[idx]), what="a submission")
    except ReplayRefused as exc:
        raise ProtocolError(f"a submission belongs to another configuration or session "
                            f"(check: {exc.check})") from None
    if len(msg.blobs) != config.n_chunks + 1:
        raise ProtocolError(f"a submission must hold {config.n_chunks} ciphertext(s) and a "
                            "signature")
    blobs = list(msg.blobs[:-1])
    roster.verify(names[idx], _SIG_SUBMIT, _submission_payload(session, names[idx], blobs),
                  msg.blobs[-1])
    return idx, blobs


class _SignedSubmissions:
    """What both threshold aggregators do with a submission: check its binding and its
    sender's signature, add its ciphertexts into the running sums and keep its bytes to
    relay to every party."""

    _binding: Any
    _config: Any
    _names: tuple[str, ...]
    _context: CKKSContext
    _running: Any
    _seen: list[int]
    _raw: dict[int, bytes]
    _load_s: float
    clock: Any

    def _add_signed(self, submission: bytes, roster: Roster, allowed: Sequence[int] | None,
                    *, kind: str, protocol: str) -> int:
        """``add``: the sender's index once its submission checks (``allowed``: who may
        submit, ``None`` for anyone)."""
        t0 = time.perf_counter()
        with self.clock("other"):
            idx, blobs = _check_submission(submission, self._binding.session, self._config,
                                           self._names, roster, len(self._names), kind=kind,
                                           protocol=protocol)
            if idx in self._seen or (allowed is not None and idx not in allowed):
                raise ProtocolError(f"unexpected or duplicate submission from party {idx!r}")
            ctx = self._context
            self._running.add([ctx.deserialize(b, at_top=True, scale=ctx.scale)
                               for b in blobs])
            self._seen.append(idx)
            self._raw[idx] = submission
        self._load_s += time.perf_counter() - t0
        return int(idx)


class ThresholdFHAUCAggregator(_SignedSubmissions, FHAUCAggregator):
    """The aggregator of threshold mode: it computes on ciphertexts under the collective
    key, asks every included party for its key-switch shares, and masks the switched
    aggregate.

    Parameters
    ----------
    context : CKKSContext
        The collective public keys (:class:`~fedsec.crypto.collective.CollectiveKeyAggregator`).
    config : FHAUCConfig
    names : sequence of str
    session : str
        The collective set-up's session.
    roster : Roster
        Submissions' signatures are checked as they arrive (a bad one is refused and
        attributed here rather than at every party).
    min_parties : int, optional
    """

    def __init__(self, context: CKKSContext, config: FHAUCConfig, *, names: Sequence[str],
                 session: str, roster: Roster, min_parties: int | None = None) -> None:
        self._roster = roster
        super().__init__(context, config, names=names, session=session,
                         min_parties=min_parties)
        self._binding = evaluation_binding(session, config.digest(), PROTOCOL, AGGREGATOR)
        self._raw: dict[int, bytes] = {}
        self._pending: tuple[Any, Any, list[int]] | None = None

    def begin(self) -> None:
        super().begin()
        self._raw = {}
        self._pending = None

    @property
    def included_indices(self) -> list[int]:
        """The parties (indices into the names) whose submissions were added."""
        return sorted(self._seen)

    @receives("fhauc-t/submit")
    def add(self, submission: bytes) -> int:
        """Check one submission (binding, signature) and add it into the running sums."""
        return self._add_signed(submission, self._roster, None, kind="fhauc-t/submit",
                                protocol=PROTOCOL)

    def switch_request(self) -> bytes:
        """The aggregate of the submissions added since :meth:`begin`, and the request
        (every included submission) each included party answers with its shares."""
        seen = sorted(self._seen)
        if len(seen) < max(1, self._min_parties):
            raise ProtocolError(f"only {len(seen)} submissions; at least {self._min_parties} "
                                "are required")
        t1 = time.perf_counter()
        with self.clock("arithmetic"):
            q, rot = self.combine(self._running.sums())
        self._compute_s = time.perf_counter() - t1
        self._pending = (q, rot, seen)
        meta = self._binding.bind({"parties": seen}, step="switch", to=BROADCAST)
        return wire.encode("fhauc-t/switch", meta, [self._raw[i] for i in seen])

    @receives("fhauc-t/share")
    def finish_shares(self, shares: Sequence[bytes]) -> bytes:
        """Add every included party's shares (the aggregate, now under the result key),
        mask it and return the result every party decrypts."""
        if self._pending is None:
            raise ProtocolError("key-switch shares before the request")
        q, rot, seen = self._pending
        got: dict[int, list[bytes]] = {}
        for raw in shares:
            msg = wire.decode(raw, expect="fhauc-t/share")
            idx = party_index(msg.meta, len(self._names))
            check_bound(self._binding, msg.meta, step="share",
                        sender=party_role(self._names[idx]), what="a key-switch share")
            if idx in got or idx not in seen:
                raise ProtocolError(f"an unexpected key-switch share from party {idx}")
            if msg.meta.get("parties") != seen or len(msg.blobs) != _SHARES_PER_PARTY:
                raise ProtocolError(f"party {idx}'s key-switch share is for another set of "
                                    "parties")
            got[idx] = list(msg.blobs)
        if sorted(got) != seen:
            raise ProtocolError("a key-switch share is missing: every included party must "
                                "answer")
        ctx = self._context
        t1 = time.perf_counter()
        with self.clock("arithmetic"):
            q_r = mpc.combine_switch(ctx, q, (got[i][0] for i in seen))
            rot_r = mpc.combine_switch(ctx, rot, (got[i][1] for i in seen))
            out, ratio = self.mask(q_r, rot_r)
            blob = ctx.serialize(out)
        t2 = time.perf_counter()
        self._timing = {"deserialize_s": self._load_s,
                        "compute_s": self._compute_s + t2 - t1,
                        "total_s": self._load_s + self._compute_s + t2 - t1}
        self.begin()
        meta = self._binding.bind({"parties": seen, "ratio": ratio}, step="result",
                                  to=BROADCAST)
        return wire.encode("fhauc-t/result", meta, [blob])

    @receives()
    def aggregate(self, submissions: Sequence[bytes]) -> bytes:
        raise ProtocolError("threshold mode needs the parties' key-switch shares: call "
                            "add, switch_request and finish_shares")


def _threshold_federation(parties: Sequence[tuple[ArrayLike, ArrayLike]],
                          names: Sequence[str] | None, cfg: Any, allow_insecure: bool,
                          net: Network, say: Callable[[str], None]) -> tuple[
                              list[tuple[np.ndarray, np.ndarray]], dict[str, Identity],
                              Roster, Any, list[CollectiveKeys], float]:
    """Both key set-ups of an in-process threshold run: the data, identities by name, the
    roster, the collective aggregator, every party's keys and the set-up's seconds."""
    data, party_names = prepare_federation(parties, names, cfg.max_total_samples)
    identities, roster = local_federation(party_names)
    say(f"key set-up: {len(data)} parties, result key and collective keys ({cfg.preset})")
    t0 = time.perf_counter()
    result_spec = KeySpec.create(cfg.preset, [], False, allow_insecure=allow_insecure)
    _, result_keys = run_key_setup(identities, roster, result_spec, network=net)
    c_agg, keys = run_collective_key_setup(identities, roster, cfg.key_spec(), result_keys,
                                           network=net)
    assert c_agg.context is not None
    return (data, {i.name: i for i in identities}, roster, c_agg, keys,
            time.perf_counter() - t0)


def _setup_bytes_to_aggregator(net: Network) -> int:
    """Every byte both key set-ups sent the aggregator (all parties together)."""
    return sum(b for (_src, dst, kind), b in net.accounting.bytes_by_message.items()
               if dst == AGGREGATOR and kind.split("/")[0] in ("keys", "mpkeys"))


def secure_auc_threshold(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
                         decision_points: Any = 100, masking: str = "single",
                         preset: str | None = None, names: Sequence[str] | None = None,
                         progress: Callable[[str], None] | None = None,
                         allow_insecure: bool = False, network: Network | None = None
                         ) -> SecureAUCResult:
    """Run a federation in threshold mode in this process (semi-honest aggregator, no
    single key holder); see :func:`fedsec.auc.fhauc.secure_auc` with
    ``keys="threshold"``."""
    say = progress or (lambda _msg: None)
    net = network if network is not None else Network()
    before = dict(net.accounting.bytes_by_message)
    preset = preset if preset is not None else THRESHOLD_PRESET
    cfg = FHAUCConfig.create(decision_points, preset=preset, masking=masking,
                             allow_insecure=allow_insecure)
    data, by_name, roster, c_agg, keys, setup_s = _threshold_federation(
        parties, names, cfg, allow_insecure, net, say)
    agg = ThresholdFHAUCAggregator(c_agg.context, cfg, names=c_agg.names,
                                   session=c_agg.session, roster=roster)
    policy = PartyPolicy(max_decision_points=max(DEFAULT_MAX_DECISION_POINTS, cfg.n_points),
                         min_decision_points=min(DEFAULT_MIN_DECISION_POINTS, cfg.n_points),
                         presets=(cfg.preset,), max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
    roles = [ThresholdFHAUCParty(y, s, keys=k, identity=by_name[k.name], config=cfg,
                                 roster=roster, policy=policy)
             for (y, s), k in zip(data, keys, strict=True)]
    on_net = [party_role(k.name) for k in keys]
    say(f"parties encrypt their statistics under the collective key ({cfg.n_points} "
        "decision points)")
    agg.begin()
    for sub in net.gather(on_net, AGGREGATOR, [r.submit() for r in roles]):
        agg.add(sub)
    say("aggregator computes; every party recomputes the aggregate and sends its "
        "key-switch shares")
    requests = net.broadcast(AGGREGATOR, on_net, agg.switch_request())
    shares = net.gather(on_net, AGGREGATOR,
                        [r.share(q) for r, q in zip(roles, requests, strict=True)])
    response = agg.finish_shares(shares)
    say("parties decrypt the masked result with the result key")
    delivered = net.broadcast(AGGREGATOR, on_net, response)
    aucs = [r.finalize(d) for r, d in zip(roles, delivered, strict=True)]
    if max(aucs) - min(aucs) > 1e-9:
        raise ProtocolError("parties decrypted different AUC values")
    bounds = [r.error_bound for r in roles]
    up, down = bytes_per_party(net.accounting, ("fhauc-t/submit", "fhauc-t/share",
                                                "fhauc-t/switch", "fhauc-t/result"), before)
    net.accounting.add_clock(agg.clock)
    for r in roles:
        net.accounting.add_clock(r.clock)
    k = roles[0].smudging_bits
    return SecureAUCResult(
        auc=aucs[0], error_bound=float(np.max(bounds)), parties=len(roles),
        decision_points=cfg.n_points, security="semi-honest", masking=cfg.masking,
        preset=cfg.preset, bytes_up_per_party=up, bytes_down_per_party=down,
        aggregator_seconds=agg.timing["total_s"],
        setup_bytes_to_aggregator=_setup_bytes_to_aggregator(net),
        setup_seconds=setup_s,
        included=list(roles[0].included),
        extra={"keys": "threshold", "smudging_bits": k,
               "aggregator_deserialize_s": agg.timing["deserialize_s"],
               "aggregator_compute_s": agg.timing["compute_s"],
               "party_seconds": max(sum(r.clock.seconds.values()) for r in roles)},
    )


# ------------------------------------------------------------------ malicious aggregator
def _as_result_keys(keys: CollectiveKeys) -> PartyKeys:
    """The result key under the collective session (every message binds to it)."""
    r = keys.result
    return PartyKeys(keys.session, r.names, r.index, r.context, r.seed)


class ThresholdMaliciousParty(MaliciousParty):
    """A party of malicious-aggregator FHAUC holding only a share of the key its
    statistics are encrypted under.

    As :class:`~fedsec.auc.fhauc_malicious.MaliciousParty` (commit, start, the runs and
    every check of the answer), with the submission encrypted under the collective key and
    signed, and one more round: :meth:`share`, where it checks every participant's signed
    submission, recomputes the aggregate of every run and returns its key-switch share of
    it (to the result key). The aggregator then masks and answers as in single-key mode,
    and the party verifies the answer as there.
    """

    def __init__(self, y_true: ArrayLike, y_score: ArrayLike, *, keys: CollectiveKeys,
                 config: MaliciousConfig, identity: Identity, roster: Roster,
                 policy: PartyPolicy | None = None, nonce: bytes | None = None,
                 verification_cache: VerificationCache | None = None) -> None:
        if keys.context.params.name != config.preset:
            raise ValueError("the collective keys and the configuration use different "
                             "presets")
        super().__init__(y_true, y_score, keys=_as_result_keys(keys), config=config,
                         identity=identity, roster=roster, policy=policy, nonce=nonce,
                         verification_cache=verification_cache)
        self._ck = keys
        self._own = b""
        self._switched = False
        self._smudging_bits = switch_smudging_bits(keys.context.params, keys.n_parties)

    def restore_switch(self, submission: bytes, switched: bool) -> None:
        """Re-enter the state after :meth:`submit` (and :meth:`share`) for a stateless
        runtime, with :meth:`restore` for the start message; the runtime must itself
        remember that the share was sent."""
        if not isinstance(submission, bytes) or not submission:
            raise ValueError("The 'submission' parameter of restore_switch must be this "
                             "party's own submission bytes.")
        self._own = submission
        self._switched = bool(switched)

    def submit(self, start: bytes) -> bytes:
        """Round 2: every run encrypted under the collective public key, signed."""
        ctx = self._ck.context
        blobs = []
        for vec in self._submission_vectors(start):
            with self.clock("encryption"):
                blobs.append(ctx.serialize(ctx.encrypt(vec)))
        sig = self._identity.sign(_SIG_SUBMIT, _submission_payload(
            self._binding.session, self._ck.name, blobs))
        meta = self._binding.bind({"party": self._ck.index, "chunks": len(blobs)},
                                  step="submit", to=AGGREGATOR)
        self._own = wire.encode("fhauc-mt/submit", meta, [*blobs, sig])
        return self._own

    @receives("fhauc-mt/switch")
    def share(self, request: bytes) -> bytes:
        """Check every participant's signed submission (this party's unchanged), recompute
        the aggregate of every run and return this party's key-switch share of it."""
        if not self._own:
            raise ProtocolError("a key-switch request before this party submitted")
        if self._switched:
            raise ProtocolError("this party already sent its key-switch share for this "
                                "evaluation")
        try:
            msg = wire.decode(request, expect="fhauc-mt/switch",
                              max_bytes=self._policy.max_message_bytes)
        except ProtocolError as exc:
            raise TamperingDetected(f"unreadable key-switch request: {exc}",
                                    check="format") from None
        check_bound(self._binding, msg.meta, step="switch", sender=AGGREGATOR,
                    broadcast=True, what="the key-switch request", tampering=True)
        ck, cfg = self._ck, self._config
        ctx = ck.context
        seen: list[int] = []
        sums: list[Any] = [None] * cfg.n_chunks
        with self.clock("other"):
            for raw in msg.blobs:
                try:
                    idx, blobs = _check_submission(
                        raw, self._binding.session, cfg, ck.names, self._roster,
                        ck.n_parties, kind="fhauc-mt/submit", protocol="fhauc-m")
                except ProtocolError as exc:
                    raise TamperingDetected(f"a relayed submission does not check ({exc})",
                                            check="submissions") from None
                if idx in seen or (idx == ck.index and raw != self._own):
                    raise TamperingDetected("a submission is repeated or this party's was "
                                            "changed", check="submissions")
                seen.append(idx)
                for c, blob in enumerate(blobs):
                    ct = ctx.deserialize(blob, at_top=True, scale=ctx.scale)
                    sums[c] = ct if sums[c] is None else ctx.add(sums[c], ct)
            if sorted(seen) != self._participants:
                raise TamperingDetected("the key-switch request does not cover exactly the "
                                        "parties that started", check="participants")
        with self.clock("arithmetic"):
            q = combine_runs(ctx, sums, cfg.stride)
        target = ck.result_share() if ck.index == min(seen) else None
        with self.clock("decryption"):
            share = ck.share.switch_share(q, target, smudging=self._smudging_bits)
        self._switched = True
        meta = self._binding.bind({"party": ck.index, "parties": sorted(seen)}, step="share",
                                  to=AGGREGATOR)
        return wire.encode("fhauc-mt/share", meta, [share])

    @receives("fhauc-mt/result")
    def finalize(self, response: bytes) -> float:
        """Decrypt the answer with the result key and verify it (as in single-key mode)."""
        if not self._switched:
            raise ProtocolError("an answer before this party's key switch")
        return self._finalize(response, "fhauc-mt/result")


class ThresholdMaliciousAggregator(_SignedSubmissions, MaliciousAggregator):
    """The aggregator of malicious-aggregator FHAUC over collective keys: it asks every
    participant for its key-switch share of the aggregate before it can mask it."""

    def __init__(self, context: CKKSContext, config: MaliciousConfig, *,
                 names: Sequence[str], session: str, roster: Roster,
                 min_parties: int | None = None) -> None:
        super().__init__(context, config, names=names, session=session, roster=roster,
                         min_parties=min_parties)
        self._roster_t = roster
        self._raw: dict[int, bytes] = {}
        self._pending: tuple[Any, list[int]] | None = None

    def begin(self) -> None:
        super().begin()
        self._raw = {}
        self._pending = None

    @receives("fhauc-mt/submit")
    def add(self, submission: bytes) -> int:
        """Check one participant's signed submission and add it into the running sums."""
        return self._add_signed(submission, self._roster_t, self._participants,
                                kind="fhauc-mt/submit", protocol="fhauc-m")

    def switch_request(self) -> bytes:
        """The aggregate of every run, and the request (every submission) each participant
        answers with its key-switch share."""
        if sorted(self._seen) != self._participants:
            raise ProtocolError("missing submissions: malicious FHAUC needs every party that "
                                "started")
        t1 = time.perf_counter()
        with self.clock("arithmetic"):
            q = self.combine(self._running.sums())
        self._compute_s = time.perf_counter() - t1
        seen = sorted(self._seen)
        self._pending = (q, seen)
        meta = self._binding.bind({"parties": seen}, step="switch", to=BROADCAST)
        return wire.encode("fhauc-mt/switch", meta, [self._raw[i] for i in seen])

    @receives("fhauc-mt/share")
    def finish_shares(self, shares: Sequence[bytes]) -> bytes:
        """Add every participant's share (the aggregate, now under the result key), mask
        it and return the answer."""
        if self._pending is None:
            raise ProtocolError("key-switch shares before the request")
        q, seen = self._pending
        got: dict[int, bytes] = {}
        for raw in shares:
            msg = wire.decode(raw, expect="fhauc-mt/share")
            idx = party_index(msg.meta, len(self._names))
            check_bound(self._binding, msg.meta, step="share",
                        sender=party_role(self._names[idx]), what="a key-switch share")
            if idx in got or idx not in seen or msg.meta.get("parties") != seen \
                    or len(msg.blobs) != 1:
                raise ProtocolError(f"an unexpected key-switch share from party {idx}")
            got[idx] = msg.blobs[0]
        if sorted(got) != seen:
            raise ProtocolError("a key-switch share is missing: every participant must "
                                "answer")
        ctx = self._context
        t1 = time.perf_counter()
        with self.clock("arithmetic"):
            q_r = mpc.combine_switch(ctx, q, (got[i] for i in seen))
            blob = ctx.serialize(self.mask(q_r))
        t2 = time.perf_counter()
        self._timing = {"deserialize_s": self._load_s,
                        "compute_s": self._compute_s + t2 - t1,
                        "total_s": self._load_s + self._compute_s + t2 - t1}
        self.begin()
        return self.result_message(blob, kind="fhauc-mt/result")

    @receives()
    def aggregate(self, submissions: Sequence[bytes]) -> bytes:
        raise ProtocolError("threshold mode needs the parties' key-switch shares: call "
                            "add, switch_request and finish_shares")


def secure_auc_threshold_malicious(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
                                   decision_points: Any = 100, splits: int | None = None,
                                   tolerance: float = DEFAULT_TOLERANCE,
                                   runs: int = DEFAULT_RUNS,
                                   min_bound_bits: float = DEFAULT_MIN_BOUND_BITS,
                                   preset: str | None = None,
                                   names: Sequence[str] | None = None,
                                   progress: Callable[[str], None] | None = None,
                                   allow_insecure: bool = False,
                                   network: Network | None = None) -> SecureAUCResult:
    """Malicious-aggregator FHAUC in threshold mode, in this process (see
    :func:`fedsec.auc.fhauc.secure_auc` with ``security="malicious", keys="threshold"``)."""
    say = progress or (lambda _msg: None)
    net = network if network is not None else Network()
    before = dict(net.accounting.bytes_by_message)
    cfg = MaliciousConfig.create(decision_points, splits=splits, tolerance=tolerance,
                                 runs=runs, min_bound_bits=min_bound_bits,
                                 preset=preset if preset is not None else THRESHOLD_PRESET,
                                 allow_insecure=allow_insecure)
    pol = PartyPolicy(max_tolerance=max(tolerance, DEFAULT_MAX_TOLERANCE),
                      min_bound_bits=min_bound_bits,
                      max_decision_points=max(DEFAULT_MAX_DECISION_POINTS, cfg.n_points),
                      min_decision_points=min(DEFAULT_MIN_DECISION_POINTS, cfg.n_points),
                      presets=(cfg.preset,), max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
    data, by_name, roster, c_agg, keys, setup_s = _threshold_federation(
        parties, names, cfg, allow_insecure, net, say)
    agg = ThresholdMaliciousAggregator(c_agg.context, cfg, names=c_agg.names,
                                       session=c_agg.session, roster=roster)
    cache = VerificationCache()
    roles = [ThresholdMaliciousParty(y, s, keys=k, config=cfg, identity=by_name[k.name],
                                     roster=roster, policy=pol, verification_cache=cache)
             for (y, s), k in zip(data, keys, strict=True)]
    on_net = [party_role(k.name) for k in keys]
    commits = net.gather(on_net, AGGREGATOR, [r.commit() for r in roles])
    start = net.broadcast(AGGREGATOR, on_net, agg.start(commits))
    say(f"parties encrypt {cfg.runs} runs under the collective key")
    agg.begin()
    for sub in net.gather(on_net, AGGREGATOR,
                          [r.submit(st) for r, st in zip(roles, start, strict=True)]):
        agg.add(sub)
    say("every party recomputes the aggregate and sends its key-switch share")
    requests = net.broadcast(AGGREGATOR, on_net, agg.switch_request())
    shares = net.gather(on_net, AGGREGATOR,
                        [r.share(q) for r, q in zip(roles, requests, strict=True)])
    response = net.broadcast(AGGREGATOR, on_net, agg.finish_shares(shares))
    say("parties decrypt with the result key and verify")
    aucs = [r.finalize(resp) for r, resp in zip(roles, response, strict=True)]
    if max(aucs) - min(aucs) > cfg.tolerance:
        raise TamperingDetected("parties obtained different AUC values", check="agreement")
    up, down = bytes_per_party(net.accounting, ("fhauc-m/commit", "fhauc-m/start",
                                                "fhauc-mt/submit", "fhauc-mt/switch",
                                                "fhauc-mt/share", "fhauc-mt/result"), before)
    net.accounting.add_clock(agg.clock)
    for r in roles:
        net.accounting.add_clock(r.clock)
    bits = cfg.cheat_bound_bits()
    return SecureAUCResult(
        auc=aucs[0], error_bound=roles[0].error_bound, verified=True, cheat_bound_bits=bits,
        parties=len(roles), decision_points=cfg.n_points, security="malicious",
        masking="single", preset=cfg.preset, bytes_up_per_party=up,
        bytes_down_per_party=down, aggregator_seconds=agg.timing["total_s"],
        setup_bytes_to_aggregator=_setup_bytes_to_aggregator(net),
        setup_seconds=setup_s,
        included=[c_agg.names[i] for i in agg.participants],
        extra={"keys": "threshold", "verified": True, "cheat_bound_bits": bits,
               "smudging_bits": switch_smudging_bits(c_agg.context.params, len(roles)),
               "splits": cfg.splits, "runs": cfg.runs, "tolerance": cfg.tolerance,
               "auc_runs": roles[0].verification.get("auc_runs")},
    )
