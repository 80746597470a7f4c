"""Collective (N-out-of-N) CKKS key set-up as roles exchanging bytes.

After the signed key set-up (:mod:`fedsec.crypto.keysetup`), which gives every party the
session, the participants and a *result key* they all hold, the parties generate a second
key set whose secret ``s = sum_i s_i`` exists nowhere (:mod:`fedsec.crypto.multiparty`).
Data is encrypted under the collective public key; nothing encrypted under it can be
decrypted unless **every** party contributes a decryption share, and each party does so
only for a ciphertext it has recomputed itself (the protocols' business, e.g.
:mod:`fedsec.auc.fhauc_threshold`).

Rounds (protocol ``"mpkeys"``, bound to the first set-up's session and the key spec)
--------------------------------------------------------------------------------------
1. **commit** - every party draws its key share ``s_i`` and computes its public-key,
   Galois-key and first relinearisation-key shares over the common random polynomials
   (expanded from a seed derived from the confirmed set-up transcript: no role chooses
   them). It sends the SHA-256 of those shares, signed with its identity.
2. **commits / reveal** - the aggregator relays every signed commitment to every party.
   A party checks that every participant's commitment is there and signed, and its own
   unchanged, and only then reveals its shares. A party that saw the others' shares first
   could otherwise choose its own to make the collective key its own (the rogue-key
   attack, :mod:`fedsec.testing.multiparty`).
3. **relin / relin2** - the aggregator checks each revealed share against its commitment,
   adds the public and Galois shares up, and relays every committed round-1
   relinearisation share (with the hashes of each party's other shares); each party checks
   them against the commitments, adds them up **itself** and answers with its round-2
   share. (A round-2 share multiplies the key share by the round-1 sums: a sum the
   aggregator chose, a constant say, would give the key share away.)
4. **keys / check** - the aggregator sends the collective keys' data halves only
   (:func:`fedsec.crypto.multiparty.aggregate_compact_keys`); each party rebuilds the keys
   with random halves it expands itself from the common seed and its own round-1 sums (so
   no key can have a random half of the aggregator's choosing: a public key of ``(0, 0)``
   would encrypt in the clear and still decrypt "correctly"), and computes its decryption
   share of a *known-answer* ciphertext that every party computes itself from the
   transcript (:func:`fedsec.crypto.multiparty.known_answer_ciphertext` without the
   product: it exercises the public key and every Galois key, and its ``c1`` depends on the
   seed and the random halves only - a product's ``c1`` would depend on data halves the
   aggregator sent). It signs the hash of the keys it received with its share. The
   relinearisation key's data half is not checked here: a wrong one makes an evaluation's
   result garbage (refused by the parties' checks), never a share of a chosen ``c1``.
5. **confirmed** - the aggregator relays every check; each party verifies every signature
   over the same public material (an aggregator that showed parties different keys is
   caught) and combines the known-answer shares itself: the keys are used only if the
   known answer decrypts within tolerance.

What each role learns: the aggregator sees the public shares (RLWE samples), the collective
public keys, and the known-answer decryption shares of a ciphertext whose message is
public; their smudging (:data:`KNOWN_ANSWER_SMUDGING_MARGIN` bits below the level's
modulus) is far above that ciphertext's noise, so the combined result reveals the known
vector to within the check's tolerance and nothing of the noise. No key share ever leaves
its party.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsec.crypto import multiparty as mpc
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.ckks_keys import CKKSKeys
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySpec, PartyKeys, party_role
from fedsec.crypto.params import get_preset
from fedsec.crypto.rawpoly import secret_key_coeffs
from fedsec.crypto.sealio import galois_element
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire
from fedsec.protocol.binding import BROADCAST, Binding, ReplayRefused
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives

__all__ = ["CollectiveKeys", "CollectiveKeyParty", "CollectiveKeyAggregator",
           "run_collective_key_setup", "collective_session", "KNOWN_ANSWER_SMUDGING_MARGIN",
           "PROTOCOL"]

#: The binding's protocol name.
PROTOCOL = "mpkeys"
AGGREGATOR = "aggregator"
#: The known-answer shares' smudging sits this many bits below the decryption level's
#: modulus; a wrong key gives errors of the order of the modulus itself.
KNOWN_ANSWER_SMUDGING_MARGIN = 24
_SIG_COMMIT = "fedsec/mpkeys/commit"
_SIG_CHECK = "fedsec/mpkeys/check"
#: Most bytes of one message a party accepts from the aggregator (the collective keys).
PARTY_MAX_MESSAGE_BYTES = 1 << 30


def _h(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.digest()


def collective_session(result_session: str, spec: KeySpec) -> str:
    """The collective set-up's session: the first set-up's session and the key spec."""
    return _h(b"fedsec/mpkeys/session", result_session.encode(), spec.digest()).hex()


def _crs_seed(session: str) -> bytes:
    return _h(b"fedsec/mpkeys/crs", session.encode())


def _galois_elements(spec: KeySpec) -> list[int]:
    n = get_preset(spec.preset, allow_insecure=spec.allow_insecure).poly_modulus_degree
    elts = [galois_element(r, n) for r in spec.rotations]
    if spec.conjugate:
        elts.append(2 * n - 1)
    return sorted(set(elts))


def _kat_smudging(ctx: CKKSContext, ct: Any) -> int:
    """Smudging bits for the known-answer shares of ``ct``: margin bits below the modulus
    of its level."""
    primes = ctx.params.primes()[:int(ct.coeff_modulus_size())]
    return int(sum(math.log2(p) for p in primes)) - KNOWN_ANSWER_SMUDGING_MARGIN


def _kat_tolerance(ctx: CKKSContext, ct: Any, n_parties: int, smudging: int) -> float:
    """Six standard deviations of the decoded smudging (sum of ``n_parties`` uniform
    polynomials), plus the scheme's own error."""
    n = ctx.params.poly_modulus_degree
    sd = 2.0 ** smudging * math.sqrt(n_parties / 3.0) * math.sqrt(n / 2.0) / ct.scale
    return float(6.0 * sd + 1e-3)


@dataclass
class CollectiveKeys:
    """What a party holds after the collective set-up.

    ``share`` is this party's secret key share (it never leaves the party); ``context``
    the collective public keys (no secret key); ``result`` the first set-up's keys, whose
    secret every party holds (protocols switch their *outputs* to it).
    """

    session: str
    names: tuple[str, ...]
    index: int
    share: mpc.KeyShare = field(repr=False)
    context: CKKSContext = field(repr=False)
    result: PartyKeys = field(repr=False)

    @property
    def n_parties(self) -> int:
        return len(self.names)

    @property
    def name(self) -> str:
        return self.names[self.index]

    def to_bytes(self) -> bytes:
        """For this party's own disk (between the steps of a stateless runtime). Contains
        the SECRET key share and the result key."""
        meta = {"session": self.session, "names": list(self.names), "index": self.index,
                "preset": self.context.params.name}
        return wire.encode("mpkeys/party-keys", meta, [self.share.secret_bytes(),
                                                       self.context.public_bytes(),
                                                       self.result.to_bytes()])

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CollectiveKeys:
        """Load :meth:`to_bytes` (``ProtocolError`` if malformed)."""
        msg = wire.decode(data, expect="mpkeys/party-keys")
        try:
            names = tuple(msg.meta["names"])
            index = int(msg.meta["index"])
            session = str(msg.meta["session"])
            params = get_preset(str(msg.meta["preset"]), allow_insecure=allow_insecure)
        except (KeyError, TypeError, ValueError):
            raise ProtocolError("malformed collective keys state") from None
        if len(msg.blobs) != 3 or not all(isinstance(n, str) for n in names) or \
                not 0 <= index < len(names):
            raise ProtocolError("malformed collective keys state")
        share = mpc.KeyShare.from_secret_bytes(params, msg.blobs[0])
        ctx = CKKSContext.from_public_bytes(msg.blobs[1], allow_insecure=allow_insecure)
        result = PartyKeys.from_bytes(msg.blobs[2], allow_insecure=allow_insecure)
        if ctx.has_secret_key or ctx.params.name != params.name or result.names != names:
            raise ProtocolError("malformed collective keys state")
        return cls(session, names, index, share, ctx, result)

    def result_share(self) -> mpc.KeyShare:
        """The result key as a :class:`~fedsec.crypto.multiparty.KeyShare` (for the key
        switch from the collective key to it)."""
        return mpc.KeyShare(self.share.params, _coeffs=secret_key_coeffs(self.result.context))


def _binding(session: str, me: str) -> Binding:
    return Binding(session, PROTOCOL, me)


def _check(binding: Binding, meta: Any, *, step: str, sender: str, what: str,
           broadcast: bool = False) -> None:
    try:
        binding.check(meta, step=step, sender=sender, broadcast=broadcast, what=what)
    except ReplayRefused as exc:
        raise ProtocolError(f"{what} belongs to another session or step "
                            f"(check: {exc.check})") from None


def _party_of(meta: Any, names: Sequence[str]) -> int:
    idx = meta.get("party")
    if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(names):
        raise ProtocolError("invalid party index")
    return idx


def _blob_hashes(blobs: Sequence[bytes]) -> list[bytes]:
    return [hashlib.sha256(bytes(b)).digest() for b in blobs]


def _digest_of_hashes(hashes: Sequence[bytes]) -> bytes:
    return _h(b"fedsec/mpkeys/shares", *hashes)


def _shares_digest(blobs: Sequence[bytes]) -> bytes:
    """The commitment to a party's shares: a hash over each share's hash, so that one share
    (the relinearisation round-1 share, relayed to every party) can be checked against it
    with the other shares' hashes only."""
    return _digest_of_hashes(_blob_hashes(blobs))


class CollectiveKeyParty:
    """One party of the collective key set-up.

    Parameters
    ----------
    identity : Identity
        This party's signing identity (on the roster).
    roster : Roster
        The federation's identities.
    spec : KeySpec
        The keys to make (preset, rotations, conjugation); the relinearisation key always.
    result : PartyKeys
        This party's keys from :func:`fedsec.crypto.keysetup.run_key_setup` (session and
        participants; its secret is the result key).
    """

    def __init__(self, identity: Identity, roster: Roster, spec: KeySpec,
                 result: PartyKeys, *, max_message_bytes: int = PARTY_MAX_MESSAGE_BYTES
                 ) -> None:
        if identity.name != result.name:
            raise ValueError("the identity and the set-up keys name different parties")
        self._id = identity
        self._roster = roster
        self._spec = spec
        self._result = result
        self._names = result.names
        self._index = result.index
        self._max = int(max_message_bytes)
        self.session = collective_session(result.session, spec)
        self._binding = _binding(self.session, party_role(identity.name))
        self._params = get_preset(spec.preset, allow_insecure=spec.allow_insecure)
        self._elts = _galois_elements(spec)
        self._share: mpc.KeyShare | None = None
        self._blobs: list[bytes] = []
        self._relin_state: mpc.RelinRound1 | None = None
        self._commits: dict[int, bytes] = {}
        self._relin_sum: bytes | None = None
        self._context: CKKSContext | None = None
        self._compact = b""
        self._keys_hash: bytes = b""
        self._kat_seed: bytes = b""

    @property
    def name(self) -> str:
        return self._id.name

    def to_bytes(self) -> bytes:
        """This party's state between rounds, for its own disk (a stateless runtime).
        Contains the SECRET key share and the relinearisation round's ephemeral secret."""
        meta = {"session": self.session, "commits": {str(i): d.hex() for i, d in
                                                     self._commits.items()},
                "keys_hash": self._keys_hash.hex(), "kat_seed": self._kat_seed.hex(),
                "share": self._share is not None, "u": self._relin_state is not None}
        share = self._share.secret_bytes() if self._share is not None else b""
        u = (np.ascontiguousarray(self._relin_state.u, dtype="<u8").tobytes()
             if self._relin_state is not None else b"")
        return wire.encode("mpkeys/party-state", meta,
                           [share, u, self._relin_sum or b"", self._compact, *self._blobs])

    @classmethod
    def from_bytes(cls, data: bytes, identity: Identity, roster: Roster, spec: KeySpec,
                   result: PartyKeys) -> CollectiveKeyParty:
        """Resume a party saved by :meth:`to_bytes` (same identity, roster, spec and
        first set-up); ``ProtocolError`` if the state is malformed or of another set-up."""
        party = cls(identity, roster, spec, result)
        msg = wire.decode(data, expect="mpkeys/party-state", max_bytes=1 << 31)
        m = msg.meta
        try:
            if m["session"] != party.session or len(msg.blobs) < 4:
                raise ValueError("another set-up")
            party._commits = {int(i): bytes.fromhex(d) for i, d in m["commits"].items()}
            party._keys_hash = bytes.fromhex(m["keys_hash"])
            party._kat_seed = bytes.fromhex(m["kat_seed"])
            if m["share"]:
                party._share = mpc.KeyShare.from_secret_bytes(party._params, msg.blobs[0])
            if m["u"]:
                mp = mpc._mp(party._params)
                u = np.frombuffer(msg.blobs[1], dtype="<u8").astype(np.uint64)
                party._relin_state = mpc.RelinRound1(
                    mp.check_residues(u.reshape(len(mp.primes), mp.n), len(mp.primes),
                                      "relinearisation state"))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ProtocolError("malformed collective key set-up state") from None
        party._relin_sum = msg.blobs[2] or None
        party._compact = msg.blobs[3]
        party._blobs = list(msg.blobs[4:])
        if party._compact:
            party._context = party._context_of(party._compact)
        return party

    def _context_of(self, compact: bytes) -> CKKSContext:
        assert self._relin_sum is not None
        pk, gk, rk = mpc.keys_from_compact(self._params, _crs_seed(self.session),
                                           self._relin_sum, self._elts, compact)
        return CKKSContext(CKKSKeys(self._params, public_key=pk, relin_keys=rk,
                                    galois_keys=gk, rotations=self._spec.rotations,
                                    conjugate=self._spec.conjugate))

    def commit(self) -> bytes:
        """Round 1: draw the key share, compute its public shares and commit to them."""
        share = mpc.KeyShare(self._params)
        seed = _crs_seed(self.session)
        state, relin1 = share.relin_round1(seed)
        blobs = [share.public_key_share(seed)]
        blobs += [share.galois_key_share(seed, g) for g in self._elts]
        blobs.append(relin1)
        self._share, self._blobs, self._relin_state = share, blobs, state
        digest = _shares_digest(blobs)
        sig = self._id.sign(_SIG_COMMIT, self.session.encode() + self.name.encode() + digest)
        meta = self._binding.bind({"party": self._index}, step="commit", to=AGGREGATOR)
        return wire.encode("mpkeys/commit", meta, [digest, sig])

    def _parse_commit(self, raw: bytes) -> tuple[int, bytes]:
        msg = wire.decode(raw, expect="mpkeys/commit", max_bytes=1 << 12)
        idx = _party_of(msg.meta, self._names)
        sender = party_role(self._names[idx])
        try:
            Binding(self.session, PROTOCOL, AGGREGATOR).check(
                msg.meta, step="commit", sender=sender, what="a commitment")
        except ReplayRefused as exc:
            raise ProtocolError(f"a commitment belongs to another session or step "
                                f"(check: {exc.check})") from None
        if len(msg.blobs) != 2 or len(msg.blobs[0]) != 32:
            raise ProtocolError("malformed commitment")
        self._roster.verify(self._names[idx], _SIG_COMMIT,
                            self.session.encode() + self._names[idx].encode() + msg.blobs[0],
                            msg.blobs[1])
        return idx, msg.blobs[0]

    @receives("mpkeys/commits")
    def reveal(self, commits: bytes) -> bytes:
        """Round 2: check every participant's signed commitment, then reveal the shares."""
        if self._share is None:
            raise ProtocolError("reveal before commit")
        msg = wire.decode(commits, expect="mpkeys/commits", max_bytes=self._max)
        _check(self._binding, msg.meta, step="commits", sender=AGGREGATOR,
               what="the commitments", broadcast=True)
        got: dict[int, bytes] = {}
        for raw in msg.blobs:
            idx, digest = self._parse_commit(raw)
            if idx in got:
                raise ProtocolError("two commitments from one party")
            got[idx] = digest
        if set(got) != set(range(len(self._names))):
            raise ProtocolError("the commitments do not come from every participant")
        if got[self._index] != _shares_digest(self._blobs):
            raise TamperingDetected("this party's commitment was changed", check="commit")
        self._commits = got
        meta = self._binding.bind({"party": self._index}, step="reveal", to=AGGREGATOR)
        return wire.encode("mpkeys/reveal", meta, self._blobs)

    @receives("mpkeys/relin")
    def relin(self, relin_shares: bytes) -> bytes:
        """Round 3: check every participant's round-1 relinearisation share against its
        commitment, add them up itself and answer with its second share.

        The round-2 share multiplies this party's key share by the round-1 sums: sums the
        aggregator chose (a constant, say) would make it ``s_i`` plus small noise. So the
        aggregator relays the committed shares themselves (and the hashes of each party's
        other shares, to check the commitment), never a sum."""
        if self._share is None or self._relin_state is None or not self._commits:
            raise ProtocolError("relinearisation round out of order")
        msg = wire.decode(relin_shares, expect="mpkeys/relin", max_bytes=self._max)
        _check(self._binding, msg.meta, step="relin", sender=AGGREGATOR,
               what="the relinearisation shares", broadcast=True)
        n = len(self._names)
        others = 1 + len(self._elts)   # the public-key and Galois shares' hashes
        if len(msg.blobs) != 2 * n:
            raise ProtocolError("malformed relinearisation shares")
        shares = []
        for i in range(n):
            hashes, share1 = msg.blobs[2 * i], msg.blobs[2 * i + 1]
            if len(hashes) != 32 * others:
                raise ProtocolError("malformed relinearisation shares")
            parts = [hashes[32 * k:32 * (k + 1)] for k in range(others)]
            parts.append(hashlib.sha256(share1).digest())
            if _digest_of_hashes(parts) != self._commits[i]:
                raise TamperingDetected(f"the relinearisation share of {self._names[i]!r} "
                                        "is not the one it committed to",
                                        check="relin-shares")
            shares.append(share1)
        if shares[self._index] != self._blobs[-1]:
            raise TamperingDetected("this party's relinearisation share was changed",
                                    check="relin-shares")
        relin_sum = mpc.aggregate_relin_round1(self._params, shares)
        share2 = self._share.relin_round2(self._relin_state, relin_sum)
        self._relin_state = None  # the ephemeral secret is used once
        self._relin_sum = relin_sum
        meta = self._binding.bind({"party": self._index}, step="relin2", to=AGGREGATOR)
        return wire.encode("mpkeys/relin2", meta, [share2])

    @receives("mpkeys/keys")
    def check(self, keys: bytes) -> bytes:
        """Round 4: load the collective public keys, check them and answer the
        known-answer test with this party's decryption share."""
        if self._share is None or self._relin_sum is None:
            raise ProtocolError("key check out of order")
        msg = wire.decode(keys, expect="mpkeys/keys", max_bytes=self._max)
        _check(self._binding, msg.meta, step="keys", sender=AGGREGATOR,
               what="the collective keys", broadcast=True)
        if len(msg.blobs) != 1:
            raise ProtocolError("malformed collective keys")
        # only the keys' data halves travel: the random halves are this party's own
        # expansion of the common seed and the round-1 sums it received
        ctx = self._context_of(msg.blobs[0])
        self._context = ctx
        self._compact = msg.blobs[0]
        self._keys_hash = hashlib.sha256(msg.blobs[0]).digest()
        self._kat_seed = _h(b"fedsec/mpkeys/kat", self.session.encode(),
                            *[self._commits[i] for i in range(len(self._names))])
        # the ciphertext is computed here, never received (see the module)
        kat_ct, _ = mpc.known_answer_ciphertext(ctx, self._kat_seed, multiply=False)
        kat = self._share.decryption_share(kat_ct, smudging=_kat_smudging(ctx, kat_ct))
        sig = self._id.sign(_SIG_CHECK, _check_payload(self.session, self.name,
                                                       self._keys_hash, kat))
        meta = self._binding.bind({"party": self._index}, step="check", to=AGGREGATOR)
        return wire.encode("mpkeys/check", meta, [kat, sig])

    @receives("mpkeys/confirmed")
    def finish(self, confirmed: bytes) -> CollectiveKeys:
        """Round 5: every party saw the same keys and the known answer decrypts."""
        if self._context is None or self._share is None:
            raise ProtocolError("confirmation out of order")
        msg = wire.decode(confirmed, expect="mpkeys/confirmed", max_bytes=self._max)
        _check(self._binding, msg.meta, step="confirmed", sender=AGGREGATOR,
               what="the confirmations", broadcast=True)
        kat: dict[int, bytes] = {}
        for raw in msg.blobs:
            idx, share, sig = _parse_check(raw, self.session, self._names)
            if idx in kat:
                raise ProtocolError("two checks from one party")
            try:
                self._roster.verify(self._names[idx], _SIG_CHECK, _check_payload(
                    self.session, self._names[idx], self._keys_hash, share), sig)
            except ProtocolError:
                raise TamperingDetected(f"{self._names[idx]!r} did not confirm the keys this "
                                        "party received", check="equivocation") from None
            kat[idx] = share
        if set(kat) != set(range(len(self._names))):
            raise ProtocolError("the checks do not come from every participant")
        ctx = self._context
        ct, _ = mpc.known_answer_ciphertext(ctx, self._kat_seed, multiply=False)
        tol = _kat_tolerance(ctx, ct, len(self._names), _kat_smudging(ctx, ct))
        mpc.check_known_answer(ctx, self._kat_seed, [kat[i] for i in sorted(kat)],
                               tolerance=tol, multiply=False)
        return CollectiveKeys(self.session, self._names, self._index, self._share, ctx,
                              self._result)


def _check_payload(session: str, name: str, keys_hash: bytes, share: bytes) -> bytes:
    """What a party signs in ``mpkeys/check``: the keys it received and its known-answer
    share (so no role can swap or replace a share in the confirmation)."""
    return _h(b"fedsec/mpkeys/check", session.encode(), name.encode(), keys_hash,
              hashlib.sha256(share).digest())


def _parse_check(raw: bytes, session: str, names: Sequence[str]) -> tuple[int, bytes, bytes]:
    msg = wire.decode(raw, expect="mpkeys/check", max_bytes=1 << 26)
    idx = _party_of(msg.meta, names)
    try:
        Binding(session, PROTOCOL, AGGREGATOR).check(
            msg.meta, step="check", sender=party_role(names[idx]), what="a key check")
    except ReplayRefused as exc:
        raise ProtocolError(f"a key check belongs to another session or step "
                            f"(check: {exc.check})") from None
    if len(msg.blobs) != 2 or len(msg.blobs[1]) != 64:
        raise ProtocolError("malformed key check")
    return idx, msg.blobs[0], msg.blobs[1]


class CollectiveKeyAggregator:
    """The aggregator of the collective key set-up: it relays, adds public shares up and
    builds SEAL's key objects; it never holds a secret.

    Parameters
    ----------
    roster : Roster
    spec : KeySpec
    names : sequence of str
        The participants (the first set-up's, in its order).
    result_session : str
        The first set-up's session.
    """

    def __init__(self, roster: Roster, spec: KeySpec, *, names: Sequence[str],
                 result_session: str) -> None:
        self._roster = roster
        self._spec = spec
        self.names = tuple(names)
        self.session = collective_session(result_session, spec)
        self._binding = _binding(self.session, AGGREGATOR)
        self._params = get_preset(spec.preset, allow_insecure=spec.allow_insecure)
        self._elts = _galois_elements(spec)
        self._commits: dict[int, bytes] = {}
        self._key_sums = b""
        self._relin_sum: bytes | None = None
        self.context: CKKSContext | None = None
        self._kat_seed = b""

    def _sender(self, raw: bytes, kind: str, step: str, what: str,
                max_bytes: int = 1 << 30) -> tuple[int, wire.Message]:
        msg = wire.decode(raw, expect=kind, max_bytes=max_bytes)
        idx = _party_of(msg.meta, self.names)
        _check(self._binding, msg.meta, step=step, sender=party_role(self.names[idx]),
               what=what)
        return idx, msg

    def _all(self, raws: Sequence[bytes], kind: str, step: str, what: str
             ) -> dict[int, wire.Message]:
        out: dict[int, wire.Message] = {}
        for raw in raws:
            idx, msg = self._sender(raw, kind, step, what)
            if idx in out:
                raise ProtocolError(f"two {what}s from {self.names[idx]!r}")
            out[idx] = msg
        if set(out) != set(range(len(self.names))):
            missing = [self.names[i] for i in range(len(self.names)) if i not in out]
            raise ProtocolError(f"no {what} from {missing[:8]}: every participant must "
                                "take part in a collective key")
        return out

    @receives("mpkeys/commit")
    def commits(self, raws: Sequence[bytes]) -> bytes:
        """Check every signed commitment and relay them all."""
        msgs = self._all(raws, "mpkeys/commit", "commit", "commitment")
        ordered: dict[int, bytes] = {}
        for raw in raws:
            ordered[_party_of(wire.decode(raw).meta, self.names)] = raw
        for idx, msg in msgs.items():
            if len(msg.blobs) != 2 or len(msg.blobs[0]) != 32:
                raise ProtocolError(f"malformed commitment from {self.names[idx]!r}")
            name = self.names[idx]
            self._roster.verify(name, _SIG_COMMIT,
                                self.session.encode() + name.encode() + msg.blobs[0],
                                msg.blobs[1])
            self._commits[idx] = msg.blobs[0]
        meta = self._binding.bind({}, step="commits", to=BROADCAST)
        return wire.encode("mpkeys/commits", meta, [ordered[i] for i in sorted(ordered)])

    @receives("mpkeys/reveal")
    def reveals(self, raws: Sequence[bytes]) -> bytes:
        """Check the revealed shares against the commitments; build the public and Galois
        keys; return the relinearisation round-1 sums."""
        msgs = self._all(raws, "mpkeys/reveal", "reveal", "share reveal")
        count = 2 + len(self._elts)
        for idx, msg in msgs.items():
            if len(msg.blobs) != count or _shares_digest(msg.blobs) != self._commits.get(idx):
                raise ProtocolError(f"the shares of {self.names[idx]!r} are not the ones it "
                                    "committed to")
        order = sorted(msgs)
        p = self._params
        self._key_sums = mpc.aggregate_key_sums(
            p, self._elts, (msgs[i].blobs[0] for i in order),
            {g: [msgs[i].blobs[1 + k] for i in order] for k, g in enumerate(self._elts)})
        self._relin_sum = mpc.aggregate_relin_round1(p, (msgs[i].blobs[-1] for i in order))
        # every party sums the committed round-1 shares itself (see CollectiveKeyParty.relin)
        relay: list[bytes] = []
        for i in order:
            relay.append(b"".join(_blob_hashes(msgs[i].blobs[:-1])))
            relay.append(msgs[i].blobs[-1])
        meta = self._binding.bind({}, step="relin", to=BROADCAST)
        return wire.encode("mpkeys/relin", meta, relay)

    @receives("mpkeys/relin2")
    def relin_keys(self, raws: Sequence[bytes]) -> bytes:
        """Build the relinearisation key; return the collective public material."""
        if self._relin_sum is None:
            raise ProtocolError("relinearisation shares before the round-1 sums")
        msgs = self._all(raws, "mpkeys/relin2", "relin2", "relinearisation share")
        for idx, msg in msgs.items():
            if len(msg.blobs) != 1:
                raise ProtocolError(f"malformed relinearisation share from "
                                    f"{self.names[idx]!r}")
        compact = mpc.aggregate_compact_keys(self._params, self._key_sums,
                                             (msgs[i].blobs[0] for i in sorted(msgs)))
        pk, gk, rk = mpc.keys_from_compact(self._params, _crs_seed(self.session),
                                           self._relin_sum, self._elts, compact)
        self.context = CKKSContext(CKKSKeys(self._params, public_key=pk, relin_keys=rk,
                                            galois_keys=gk, rotations=self._spec.rotations,
                                            conjugate=self._spec.conjugate))
        self._kat_seed = _h(b"fedsec/mpkeys/kat", self.session.encode(),
                            *[self._commits[i] for i in range(len(self.names))])
        meta = self._binding.bind({}, step="keys", to=BROADCAST)
        return wire.encode("mpkeys/keys", meta, [compact])

    @receives("mpkeys/check")
    def confirm(self, raws: Sequence[bytes]) -> bytes:
        """Run the known-answer test on every party's share (a wrong share stops the
        set-up here) and relay every check."""
        if self.context is None:
            raise ProtocolError("key checks before the keys")
        shares: dict[int, bytes] = {}
        for raw in raws:
            idx, share, _ = _parse_check(raw, self.session, self.names)
            shares[idx] = share
        if set(shares) != set(range(len(self.names))):
            raise ProtocolError("a key check is missing")
        ctx = self.context
        ct, _ = mpc.known_answer_ciphertext(ctx, self._kat_seed, multiply=False)
        mpc.check_known_answer(ctx, self._kat_seed, [shares[i] for i in sorted(shares)],
                               tolerance=_kat_tolerance(ctx, ct, len(self.names),
                                                        _kat_smudging(ctx, ct)), multiply=False)
        meta = self._binding.bind({}, step="confirmed", to=BROADCAST)
        return wire.encode("mpkeys/confirmed", meta, list(raws))


def run_collective_key_setup(identities: Sequence[Identity], roster: Roster, spec: KeySpec,
                             result_keys: Sequence[PartyKeys], *,
                             network: Network | None = None
                             ) -> tuple[CollectiveKeyAggregator, list[CollectiveKeys]]:
    """Play the collective set-up in one process after :func:`run_key_setup`; return the
    aggregator side (its ``context`` holds the collective public keys) and each party's
    :class:`CollectiveKeys` (in the order of ``identities``)."""
    net = network if network is not None else Network()
    by_name: Mapping[str, PartyKeys] = {k.name: k for k in result_keys}
    if set(by_name) != {i.name for i in identities}:
        raise ValueError("identities and set-up keys name different parties")
    first = result_keys[0]
    parties = [CollectiveKeyParty(i, roster, spec, by_name[i.name]) for i in identities]
    agg = CollectiveKeyAggregator(roster, spec, names=first.names,
                                  result_session=first.session)
    roles = [party_role(p.name) for p in parties]
    commits = net.gather(roles, AGGREGATOR, [p.commit() for p in parties])
    relayed = net.broadcast(AGGREGATOR, roles, agg.commits(commits))
    reveals = net.gather(roles, AGGREGATOR,
                         [p.reveal(r) for p, r in zip(parties, relayed, strict=True)])
    sums = net.broadcast(AGGREGATOR, roles, agg.reveals(reveals))
    relin2 = net.gather(roles, AGGREGATOR,
                        [p.relin(r) for p, r in zip(parties, sums, strict=True)])
    keys = net.broadcast(AGGREGATOR, roles, agg.relin_keys(relin2))
    checks = net.gather(roles, AGGREGATOR,
                        [p.check(k) for p, k in zip(parties, keys, strict=True)])
    done = net.broadcast(AGGREGATOR, roles, agg.confirm(checks))
    return agg, [p.finish(d) for p, d in zip(parties, done, strict=True)]
