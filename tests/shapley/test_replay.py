"""Replay and splicing attacks on every message a SecSV or SecretSV role reads
(:mod:`fedsec.protocol.binding`).

A network attacker (or a relaying role) substitutes, *in flight*, one genuine message of
an honest evaluation by a genuine message of the same kind from **another session**,
**another round**, **another coalition**, **another batch** or **another layer**, or by
the message meant for the other server (**swapped**); and re-delivers a message that was
already answered (**duplicated**, **stale request id**). Each must raise
:class:`~fedsec.protocol.binding.ReplayRefused` naming the context field that differed.

Why each test can fail: the same substitution with the donor's *content* but the honest
message's binding (context and ids; :func:`replay_world.splice`) is what a receiver saw
before binding existed -- it is not refused by binding (asserted for every case), and
for a set of cases it is accepted outright and the evaluation returns a different
result (asserted): before this change those replays silently changed the FSV.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import fuzz_shapley as fz  # noqa: E402
import replay_world as rw  # noqa: E402

from fedsec.errors import ProtocolError  # noqa: E402
from fedsec.protocol import wire  # noqa: E402
from fedsec.protocol.binding import ReplayRefused  # noqa: E402

#: every Shapley protocol refuses with fedsec.protocol.binding's ReplayRefused
REFUSED = ReplayRefused
ProtocolReplayRefused = ReplayRefused

# ------------------------------------------------------------------------------ cases
# role input -> (message kind, indices of the substituted message(s) in the first batch,
# per-batch count of that kind, batches to skip for "another batch" -- past one whose
# owner is the receiving client, which Prop. 6.8 already refuses)
Input = tuple[str, tuple[int, ...], int, int]
SECSV_INPUTS: dict[str, Input] = {
    "A.open_eval": ("eval", (0,), 1, 1),
    "P.receive_product": ("product", (2,), 4, 1),
    "client.decrypt_layer": ("decrypt", (0,), 3, 2),
    "P.receive_share": ("share", (0,), 6, 1),
    "A.receive_share": ("share", (1,), 6, 1),
    "P.compare[labels]": ("share", (4,), 6, 1),
    "A.label_diff": ("share", (5,), 6, 1),
    "A.label_diff[label-mask]": ("label-mask", (0,), 1, 1),
    "P.compare[label-diff]": ("label-diff", (0,), 1, 1),
}
SECRETSV_INPUTS: dict[str, Input] = {
    "A.open_eval": ("eval", (0,), 1, 1),
    "P.open_share[triple]": ("triple", (0,), 6, 1),
    "A.open_share[triple]": ("triple", (1,), 6, 1),
    "A.beaver[P's opening]": ("open", (0,), 6, 1),
    "P.beaver[A's opening]": ("open", (1,), 6, 1),
    "client.reconstruct": ("output", (0, 1), 6, 2),  # both outputs (P's and A's)
    "P.receive_share": ("share", (0,), 6, 1),
    "A.receive_share": ("share", (1,), 6, 1),
    "P.compare[labels]": ("share", (4,), 6, 1),
    "A.label_diff[labels]": ("share", (5,), 6, 1),
    "A.label_diff[label-mask]": ("label-mask", (0,), 1, 1),
    "P.compare[label-diff]": ("label-diff", (0,), 1, 1),
}
# "layer": another layer's message of the same evaluation, (targets, donors); "swapped":
# the other server's copy, or for openings the receiver's own (a reflection)
Pair = tuple[tuple[int, ...], tuple[int, ...]]
SECSV_MORE: dict[str, dict[str, Pair]] = {
    "layer": {"P.receive_product": ((2,), (3,)), "client.decrypt_layer": ((1,), (0,)),
              "P.receive_share": ((0,), (2,)), "A.receive_share": ((1,), (3,))},
    "swapped": {"P.receive_product": ((0,), (1,))},  # the product of another model
}
# misdelivered copies, in flight: the role that returns a pair (P's copy, A's copy), its
# call number, and which server gets the other's copy
Misdelivery = tuple[str, int, str]
SECSV_COPIES: dict[str, Misdelivery] = {
    "P.receive_share": ("decrypt_layer", 0, "P"), "A.receive_share": ("decrypt_layer", 0, "A"),
    "P.compare[labels]": ("decrypt_layer", 2, "P"), "A.label_diff": ("decrypt_layer", 2, "A")}
SECRETSV_COPIES: dict[str, Misdelivery] = {
    "P.open_share[triple]": ("triple", 0, "P"), "A.open_share[triple]": ("triple", 0, "A"),
    "A.beaver[P's opening]": ("open_share", 0, "A"),  # A gets its own opening back
    "P.beaver[A's opening]": ("open_share", 0, "P"),  # P gets its own opening back
    "P.receive_share": ("reconstruct", 0, "P"), "A.receive_share": ("reconstruct", 0, "A"),
    "P.compare[labels]": ("reconstruct", 2, "P"), "A.label_diff[labels]": ("reconstruct", 2, "A")}
SECRETSV_MORE: dict[str, dict[str, Pair]] = {
    "layer": {"P.open_share[triple]": ((0,), (2,)), "A.open_share[triple]": ((1,), (3,)),
              "A.beaver[P's opening]": ((0,), (2,)), "P.beaver[A's opening]": ((1,), (3,)),
              "client.reconstruct": ((2, 3), (0, 1)), "P.receive_share": ((0,), (2,)),
              "A.receive_share": ((1,), (3,))},
    "swapped": {},
}
# the binding check that refuses; where the receiver cannot know a field itself (A is
# told the coalition and batch by P; a client has no schedule), the next role that does
# refuses the answer and names it
EXPECT: dict[Any, str | tuple[str, ...]] = {
    "session": "session", "round": "round", "mask": "mask", "batch": "batch",
    "layer": "layer", "swapped": "step"}
#: SecSV's binding (fedsec.protocol.binding) names the coalition, batch and layer
#: together ("index"), and a copy meant for the other server by its recipient; a message
#: of another batch or layer that another client decrypted also differs in its sender (a
#: share) or recipient (a request), which the binding checks first
SECSV_EXPECT: dict[Any, str | tuple[str, ...]] = {
    **EXPECT, "mask": "index", "batch": ("index", "sender", "recipient"),
    "layer": ("index", "sender", "recipient"), "copy": "recipient"}
# SecretSV's binding (fedsec.protocol.binding) holds the coalition, batch and layer as the
# context's index, and names the sender and recipient: a copy meant for the other server
# is another recipient's, a reflected opening another sender's
SECRETSV_EXPECT: dict[Any, str | tuple[str, ...]] = {
    "session": "session", "round": "round", "mask": "index", "batch": "index",
    "layer": "index", "swapped": ("sender", "recipient"),
    # outputs replayed to a client: addressed to the client of their own evaluation and
    # layer, unless that is the same client (then the next role refuses by the index)
    **{("client.reconstruct", how): ("index", "recipient") for how in ("mask", "batch",
                                                                       "layer")},
    ("client.reconstruct", "round"): ("round", "recipient"),
    # a client's answer replayed from another layer or batch: of another client, unless
    # the same client answered both (then by the index)
    **{(name, how): ("sender", "index") for how in ("batch", "layer") for name in (
        "P.receive_share", "A.receive_share", "P.compare[labels]", "A.label_diff[labels]")}}


def _cases(inputs: dict[str, Input], more: dict[str, dict[str, Pair]],
           copies: dict[str, Misdelivery]) -> list[tuple[str, str]]:
    out = []
    for name in inputs:
        out += [(name, how) for how in ("session", "round", "mask", "batch")]
        out += [(name, how) for how in ("layer", "swapped") if name in more[how]]
        if name in copies:
            out.append((name, "swapped"))
    return out


def _misdeliver(r: Any, how: Misdelivery, splice: bool) -> None:
    """Patch the run ``r`` so that one server gets the copy meant for the other (or, for
    openings, its own opening back) -- with the genuine binding of the copy, or with the
    binding of the copy it replaces (``splice``)."""
    method, call, victim = how
    count = [0]

    def misdeliver(to_p: bytes, to_a: bytes) -> tuple[bytes, bytes]:
        if victim == "P":
            return (rw.splice(to_a, to_p) if splice else to_a), to_a
        return to_p, (rw.splice(to_p, to_a) if splice else to_p)

    if method == "open_share":  # openings: the runner sends P's, then A's
        own: dict[str, bytes] = {}
        for srv in (r.P, r.A):
            orig = srv.open_share

            def opened(*a: Any, srv: Any = srv, orig: Any = orig) -> Any:
                out = orig(*a)
                own[srv.name] = out
                return out
            srv.open_share = opened
        k = 0 if victim == "A" else 1  # the message the victim reads: the other's opening

        def reflect(old: bytes) -> bytes:
            mine = own[victim]
            return rw.splice(mine, old) if splice else mine
        fz.recorder_of(r).swaps = {("open", k): reflect}
        return
    owners = [r.dealer] if method == "triple" else r.clients
    for o in owners:
        orig = getattr(o, method)

        def patched(*a: Any, orig: Any = orig) -> Any:
            out = orig(*a)
            count[0] += 1
            return misdeliver(*out) if count[0] - 1 == call else out
        setattr(o, method, patched)


@pytest.fixture(scope="module")
def secsv() -> list[rw.Run]:
    return rw.secsv_runs()


@pytest.fixture(scope="module")
def secretsv() -> list[rw.Run]:
    return rw.secretsv_runs()


def _plan(runs: list[rw.Run], inputs: dict[str, Input], more: dict[str, dict[str, Pair]],
          name: str, how: str) -> tuple[str, dict[int, bytes]]:
    """The substituted messages: target index -> donor bytes."""
    kind, ks, per, skip = inputs[name]
    main = runs[0].logs[(0, rw.MAIN)][0]
    if how in more:
        targets, donors = more[how][name]
        return kind, {k: rw.nth(main, kind, d)[2] for k, d in zip(targets, donors,
                                                                    strict=True)}
    if how == "batch":
        return kind, {k: rw.nth(main, kind, k + skip * per)[2] for k in ks}
    log = {"session": runs[1].logs[(0, rw.MAIN)][0], "round": runs[0].logs[(1, rw.MAIN)][0],
           "mask": runs[0].logs[(0, rw.OTHER_MASK)][0]}[how]
    return kind, {k: rw.nth(log, kind, k)[2] for k in ks}


def _attempt(runs: list[rw.Run], clone: Callable[[Any], Any], kind: str,
             swaps: dict[int, Callable[[bytes], bytes]],
             patch: Callable[[Any], None] | None = None
             ) -> tuple[np.ndarray | None, Exception | None]:
    """Evaluate the main coalition of round 0 with ``swaps`` applied in flight."""
    r = clone(runs[0].before[0])
    rec = fz.tap(r, fz.Recorder(keep=False))
    rec.swaps = {(kind, k): fn for k, fn in swaps.items()}
    if patch is not None:
        patch(r)
    try:
        return r.evaluate(0, rw.MAIN, None), None
    except ProtocolError as exc:
        return None, exc


def _expected(expect: dict[Any, str | tuple[str, ...]], how: str, name: str = ""
              ) -> tuple[str, ...]:
    want = expect.get((name, how), expect[how])
    return (want,) if isinstance(want, str) else want


def _run_case(runs: list[rw.Run], clone: Callable[[Any], Any], inputs: dict[str, Input],
              more: dict[str, dict[str, Pair]], copies: dict[str, Misdelivery], name: str,
              how: str, expect: dict[Any, str | tuple[str, ...]] = EXPECT
              ) -> tuple[Exception | None, np.ndarray | None]:
    if how == "swapped" and name in copies:
        out, exc = _attempt(runs, clone, "", {}, lambda r: _misdeliver(r, copies[name], False))
        assert out is None, f"{name}: a misdelivered copy was accepted"
        assert isinstance(exc, ReplayRefused) \
            and exc.check in _expected(expect, "copy" if "copy" in expect else "swapped"), \
            f"{name}: {exc!r}"
        out2, exc2 = _attempt(runs, clone, "", {},
                              lambda r: _misdeliver(r, copies[name], True))
        assert not isinstance(exc2, ReplayRefused), f"{name} / {how}: {exc2!r}"
        return exc2, out2
    kind, donors = _plan(runs, inputs, more, name, how)
    main = runs[0].logs[(0, rw.MAIN)][0]
    for k, b in donors.items():  # a genuine message of the kind the receiver reads
        assert wire.decode(b).kind == wire.decode(rw.nth(main, kind, k)[2]).kind
        assert b != rw.nth(main, kind, k)[2]
    out, exc = _attempt(runs, clone, kind, {k: (lambda _old, b=b: b)
                                            for k, b in donors.items()})
    assert out is None, f"{name}: a replay from another {how} was accepted"
    assert isinstance(exc, ProtocolReplayRefused | ReplayRefused), f"{name} / {how}: {exc!r}"
    assert exc.check in _expected(expect, how, name), \
        f"{name} / {how}: refused by {exc.check}: {exc}"
    # the donor's content under the binding of the message it replaces: what a receiver
    # saw before binding existed -- binding does not refuse it
    out2, exc2 = _attempt(runs, clone, kind, {k: (lambda old, b=b: rw.splice(b, old))
                                              for k, b in donors.items()})
    assert not isinstance(exc2, ProtocolReplayRefused | ReplayRefused), \
        f"{name} / {how}: {exc2!r}"
    return exc2, out2


@pytest.mark.parametrize(("name", "how"), _cases(SECSV_INPUTS, SECSV_MORE, SECSV_COPIES))
def test_secsv_replay_refused(secsv: list[rw.Run], name: str, how: str) -> None:
    _run_case(secsv, fz.clone_srun, SECSV_INPUTS, SECSV_MORE, SECSV_COPIES, name, how,
              SECSV_EXPECT)


@pytest.mark.parametrize(("name", "how"),
                         _cases(SECRETSV_INPUTS, SECRETSV_MORE, SECRETSV_COPIES))
def test_secretsv_replay_refused(secretsv: list[rw.Run], name: str, how: str) -> None:
    _run_case(secretsv, fz.clone_trun, SECRETSV_INPUTS, SECRETSV_MORE, SECRETSV_COPIES,
              name, how, SECRETSV_EXPECT)


@pytest.mark.parametrize("protocol", ["secsv", "secretsv"])
def test_label_replays_changed_the_result_before_binding(secsv: list[rw.Run],
                                                        secretsv: list[rw.Run],
                                                        protocol: str) -> None:
    """The label shares and A's label difference carry nothing a receiver could check
    without binding: spliced in (the donor's content under the replaced message's binding,
    i.e. what the protocol accepted before this change), every such replay is accepted and
    the evaluation -- hence the utility and the FSV -- silently changes. (Replays of data
    shares, products, triples and openings are mostly caught later by the decrypting
    client's bound check; a replayed decryption request or output pair is decrypted by a
    client without changing the result: a leak, not a wrong FSV.)"""
    runs, clone, inputs, more, copies, expect = (
        (secsv, fz.clone_srun, SECSV_INPUTS, SECSV_MORE, SECSV_COPIES, SECSV_EXPECT)
        if protocol == "secsv" else
        (secretsv, fz.clone_trun, SECRETSV_INPUTS, SECRETSV_MORE, SECRETSV_COPIES,
         SECRETSV_EXPECT))
    honest = runs[0].logs[(0, rw.MAIN)][1]
    names = [n for n in inputs if "label" in n]
    assert len(names) == 4
    for name in names:
        for n, how in _cases(inputs, more, copies):
            if n != name or (how == "swapped" and name in copies):
                # since the zero test, P's and A's copies of the labels differ in shape
                # ((b', g') vs (r, b'', g'')): a swapped copy is refused whatever its binding
                continue
            exc2, out2 = _run_case(runs, clone, inputs, more, copies, name, how, expect)
            assert exc2 is None and out2 is not None, f"{name} / {how}: {exc2!r}"
            assert not np.array_equal(out2, honest), f"{name} / {how}"


def test_honest_runs_pass(secsv: list[rw.Run], secretsv: list[rw.Run]) -> None:
    """Binding does not refuse an honest run: a fresh evaluation of every recorded
    (round, coalition) gives the recorded result; SecSV and SecretSV agree (exact)."""
    for runs, clone in ((secsv, fz.clone_srun), (secretsv, fz.clone_trun)):
        for (t, mask), (_log, honest) in runs[0].logs.items():
            r = clone(runs[0].before[t])
            np.testing.assert_array_equal(r.evaluate(t, mask, None), honest)
    for key in secsv[0].logs:
        np.testing.assert_array_equal(secsv[0].logs[key][1], secretsv[0].logs[key][1])


# ---------------------------------------------------------------------- duplicates, stale ids
def _at(runs: list[rw.Run], clone: Callable[[Any], Any], kind: str, k: int
        ) -> tuple[Any, str, list[bytes]]:
    """The run just before the ``k``-th ``kind`` message of the main evaluation is
    delivered (a snapshot), its receiver and the ``kind`` messages up to it."""
    r = clone(runs[0].before[0])
    rec = fz.tap(r, fz.Recorder(keep=False))
    sent: list[bytes] = []
    got: list[tuple[Any, str, list[bytes]]] = []

    def hook(_s: str, receiver: str, kd: str, payload: bytes) -> None:
        if kd == kind and not got:
            sent.append(payload)
            if len(sent) == k + 1:
                got.append((clone(r), receiver, list(sent)))

    rec.hook = hook
    r.evaluate(0, rw.MAIN, None)
    return got[0]


def test_secsv_duplicates_and_stale_ids(secsv: list[rw.Run]) -> None:
    # a client answers a decryption request once
    snap, to, (req,) = _at(secsv, fz.clone_srun, "decrypt", 0)
    client = snap.clients[int(to.split(":")[1])]
    client.decrypt_layer(req)
    with pytest.raises(REFUSED) as e:
        client.decrypt_layer(req)
    assert e.value.check == "request-id"
    # A opens an evaluation once
    snap, _, (ev,) = _at(secsv, fz.clone_srun, "eval", 0)
    snap.A.open_eval(ev)
    with pytest.raises(REFUSED) as e:
        snap.A.open_eval(ev)
    assert e.value.check == "request-id"
    # P takes A's product once (layer 1's: products 0 and 1 are the first layer's)
    snap, _, sent = _at(secsv, fz.clone_srun, "product", 2)
    snap.P.decrypt_request([sent[2]])
    with pytest.raises(REFUSED) as e:
        snap.P.decrypt_request([sent[2]])
    assert e.value.check == "request-id"
    # P and A take each re-share once: both moved on to the next layer, whose decrypting
    # client (P knows it: i_{l+1} != i_l) and index the share does not carry
    snap, _, (to_p, to_a) = _at(secsv, fz.clone_srun, "share", 1)
    snap.P.receive_share(to_p)
    with pytest.raises(ReplayRefused) as e:
        snap.P.receive_share(to_p)
    assert e.value.check == "sender"
    snap.A.receive_share(to_a)
    with pytest.raises(ReplayRefused) as e:
        snap.A.receive_share(to_a)
    assert e.value.check == "index"
    # a stale request id: batch 0's re-share, relabelled as batch 1's (same layer)
    snap1, _, sent = _at(secsv, fz.clone_srun, "share", 7)
    to_p0, to_p1 = sent[0], sent[6]
    stale = rw.splice(to_p0, to_p1)
    msg = wire.decode(stale)
    stale = fz._encode_loose(msg.kind, {**msg.meta, "re": wire.decode(to_p0).meta["re"]},  # noqa: SLF001
                             list(msg.blobs))
    with pytest.raises(REFUSED) as e:
        fz.clone_sserver(snap1.P).receive_share(stale)
    assert e.value.check == "request-id"
    snap1.P.receive_share(to_p1)  # the honest one is still taken


def test_secretsv_duplicates_and_stale_ids(secretsv: list[rw.Run]) -> None:
    from fedsec.protocol.binding import ReplayRefused

    # a client reconstructs an output pair once
    snap, to, (out_p, out_a) = _at(secretsv, fz.clone_trun, "output", 1)
    client = snap.clients[int(to.split(":")[1])]
    client.reconstruct(out_p, out_a)
    with pytest.raises(ReplayRefused) as e:
        client.reconstruct(out_p, out_a)
    assert e.value.check == "request-id"
    # a triple is used once, even in a fresh layer state
    snap, _, (tp,) = _at(secretsv, fz.clone_trun, "triple", 0)
    snap.P.open_share(tp)
    ev = snap.P._eval  # noqa: SLF001
    assert ev is not None
    ev.opened = False  # as if the layer had moved on: the id alone refuses
    with pytest.raises(ReplayRefused) as e:
        snap.P.open_share(tp)
    assert e.value.check == "request-id"
    # A opens an evaluation once
    snap, _, (ev_msg,) = _at(secretsv, fz.clone_trun, "eval", 0)
    snap.A.open_eval(ev_msg)
    with pytest.raises(ReplayRefused) as e:
        snap.A.open_eval(ev_msg)
    assert e.value.check == "request-id"
    # P takes a re-share once: the next one must be of the next layer
    snap, _, (to_p,) = _at(secretsv, fz.clone_trun, "share", 0)
    snap.P.receive_share(to_p)
    with pytest.raises(ReplayRefused) as e:
        snap.P.receive_share(to_p)
    assert e.value.check in ("sender", "index")  # the next layer's client, or index


# ---------------------------------------------------------------------- HESV
@pytest.fixture(scope="module")
def hworld() -> fz.ShapleyWorld:
    return fz.build_shapley_world()


def _hre(data: bytes, **meta: Any) -> bytes:
    msg = wire.decode(data)
    return fz._encode_loose(msg.kind, {**msg.meta, **meta}, list(msg.blobs))  # noqa: SLF001


def _readdress(data: bytes, recipient: str) -> bytes:
    """An HESV message as a relay that delivers it to ``recipient`` would address it."""
    from fedsec.protocol.binding import CTX, Context

    ctx = Context.from_meta(wire.decode(data).meta[CTX])
    return _hre(data, **{CTX: ctx.at(recipient=recipient).to_meta()})


def test_hesv_client_replays_and_misrouting(hworld: fz.ShapleyWorld) -> None:
    from fedsec.errors import PolicyViolation
    from fedsec.protocol.binding import ReplayRefused

    w = hworld
    # a difference request answered twice: refused by its id (nothing else remembers it)
    diff = next(r for r in w.h_requests if r.kind == "hesv/diff")
    client = fz.clone_hclient(diff.client)
    client.count(diff.request)
    with pytest.raises(REFUSED) as e:
        client.count(diff.request)
    assert e.value.check == "request-id"
    fz.clone_hclient(diff.client).count(diff.request)  # a fresh client state answers it
    # a request of an earlier round than the client already served
    req = next(r for r in w.h_requests if r.kind == "hesv/layer")
    client = fz.clone_hclient(req.client)
    client._round = 1  # noqa: SLF001 - as after serving round 1 (rounds run in order)
    with pytest.raises(REFUSED) as e:
        client.decrypt_layer(req.request)
    assert e.value.check == "round"
    fz.clone_hclient(req.client).decrypt_layer(req.request)  # round 0 is current: fine
    # an honest request delivered to a client that is not its chain member, but that
    # Prop. 6.8 alone would let decrypt (not an owner, nothing of this evaluation seen)
    meta = fz._hmeta(req.request)  # noqa: SLF001
    asked = req.client.index
    bystander = next(c for c in w.h_clients if c.index not in (asked, meta["owner"])
                     and c.index != meta.get("model_owner"))
    with pytest.raises(PolicyViolation, match="not the chain's decryptor"):
        fz.clone_hclient(bystander).decrypt_layer(_readdress(req.request, bystander.name))
    with pytest.raises(ReplayRefused) as e:  # as addressed: to another client
        fz.clone_hclient(bystander).decrypt_layer(req.request)
    assert e.value.check == "recipient"


def test_hesv_server_takes_each_reply_once(hworld: fz.ShapleyWorld) -> None:
    from fedsec.protocol.binding import new_request_id

    w = hworld
    for kind in ("hesv/activated", "hesv/predicted", "hesv/count"):
        st = next(s for s in w.h_steps if s.kind == kind)
        # a reply echoing another request's id (stale, or of another evaluation)
        with pytest.raises(REFUSED) as e:
            fz.clone_hserver(st.server).step(st.sender, _hre(st.reply, re=new_request_id()))
        assert e.value.check == "request-id"
        with pytest.raises(ProtocolError):  # no id at all (what every reply was before)
            fz.clone_hserver(st.server).step(st.sender, _hre(st.reply, re=None))
        server = fz.clone_hserver(st.server)
        server.step(st.sender, st.reply)  # the genuine reply is taken ...
        with pytest.raises(ProtocolError):  # ... once
            server.step(st.sender, st.reply)


# ---------------------------------------------------------------------- set-up inputs
def _refused(call: Callable[[], Any], check: str) -> None:
    with pytest.raises((ReplayRefused, ProtocolReplayRefused)) as e:
        call()
    assert e.value.check == check, e.value


def test_secsv_setup_inputs_bound(secsv: list[rw.Run]) -> None:
    """Data shares, models, the plan, the batch list and the bounds from another session
    (or round, or meant for the other server) are refused; spliced (the genuine binding
    on the foreign content) they were accepted -- nothing else tells them apart."""
    from fedsec.shapley import secsv as sv

    mine, other = secsv[0].setup, secsv[1].setup
    run = secsv[0].before[0]
    cfg, spec = sv.SecSVConfig().check(), run.record.spec
    session, bfv = run.P._b.session, run.P._bfv  # noqa: SLF001

    def server(cls: Any) -> Any:
        if cls is sv.AuxiliaryServer:
            out = cls(bfv, spec, rw.N, cfg, sv.round_infos(run.record, cfg), session=session)
            out.receive_plan(mine.of("plan")[0][2])
            return out
        out = cls(bfv, spec, rw.N, cfg, sv.round_infos(run.record, cfg), session=session,
                  groups=[[c] for c in range(rw.N)], strong=True, sizes=[3] * rw.N)
        out._plan = run.P.plan  # noqa: SLF001 - as after its make_plan
        return out

    data_p = [p for _, _, p in mine.of("data", receiver="P")]
    data_a = [p for _, _, p in mine.of("data", receiver="A")]
    foreign = other.of("data", receiver="P")[0][2]
    _refused(lambda: server(sv.PrincipalServer).receive_data([foreign, *data_p[1:]]),
             "session")
    _refused(lambda: server(sv.PrincipalServer).receive_data([data_a[0], *data_p[1:]]),
             "recipient")
    server(sv.PrincipalServer).receive_data([rw.splice(foreign, data_p[0]), *data_p[1:]])
    server(sv.AuxiliaryServer).receive_data(data_a)
    # models: round 0's are expected; round 1's and another session's are refused
    models = [p for _, r, p in mine.of("model", receiver="P")]
    n_models = len(models) // 2
    p_srv = fz.clone_sserver(run.P)
    p_srv._models = {}  # noqa: SLF001
    _refused(lambda: p_srv.receive_model(models[n_models]), "round")
    _refused(lambda: p_srv.receive_model(other.of("model", receiver="P")[0][2]), "session")
    # (the same model key in both sessions: the owner is also the message's sender)
    c0 = next(p for p in models if wire.decode(p).meta["key"] == "c0")
    donor = next(p for _, _, p in other.of("model", receiver="P")
                 if wire.decode(p).meta["key"] == "c0")
    assert p_srv.receive_model(rw.splice(donor, c0))
    assert p_srv.receive_model(c0)
    # the plan (clients), the batch list (A), the bounds (P)
    client = fz.clone_sclient(run.clients[0])
    _refused(lambda: client.receive_plan(other.of("plan")[0][2]), "session")
    client.receive_plan(mine.of("plan")[0][2])
    a_srv = fz.clone_sserver(run.A)
    _refused(lambda: a_srv.receive_batches(other.of("batches")[0][2]), "session")
    a_srv.receive_batches(mine.of("batches")[0][2])
    bounds = [p for _, _, p in mine.of("bounds")]
    _refused(lambda: sv.pick_fixed_point([other.of("bounds")[0][2], *bounds[1:]],
                                         sv.round_infos(run.record, cfg), cfg, bfv.t,
                                         run.record.spec, binding=run.P._b),  # noqa: SLF001
             "session")


def test_secretsv_setup_inputs_bound(secretsv: list[rw.Run]) -> None:
    mine, other = secretsv[0].setup, secretsv[1].setup
    run = secretsv[0].before[0]
    empty = fz.clone_tserver(run.P)
    empty._xbound, empty._models, empty._bounds = {}, {}, {}  # noqa: SLF001
    data_p = [p for _, _, p in mine.of("data", receiver="P")]
    data_a = [p for _, _, p in mine.of("data", receiver="A")]
    foreign = other.of("data", receiver="P")[0][2]
    _refused(lambda: fz.clone_tserver(empty).receive_data([foreign, *data_p[1:]]), "session")
    _refused(lambda: fz.clone_tserver(empty).receive_data([data_a[0], *data_p[1:]]),
             "recipient")
    fz.clone_tserver(empty).receive_data([rw.splice(foreign, data_p[0]), *data_p[1:]])
    models = [p for _, r, p in mine.of("model", receiver="P")]
    models_a = [p for _, r, p in mine.of("model", receiver="A")]
    n_models = len(models) // 2
    srv = fz.clone_tserver(empty)
    _refused(lambda: srv.receive_model(models[n_models]), "round")
    _refused(lambda: srv.receive_model(models_a[0]), "recipient")  # A's share of the model
    _refused(lambda: srv.receive_model(other.of("model", receiver="P")[0][2]), "session")
    srv.receive_model(rw.splice(models_a[0], models[0]))  # accepted without binding
    srv.receive_model(models[0])
    a_srv = fz.clone_tserver(run.A)
    _refused(lambda: a_srv.receive_order(other.of("batches")[0][2]), "session")
    a_srv.receive_order(mine.of("batches")[0][2])


def test_clients_refuse_an_earlier_round(secsv: list[rw.Run], secretsv: list[rw.Run]) -> None:
    """After serving round 1, a client refuses a genuine request of round 0 (a fresh client
    -- what every client was before binding -- decrypts it)."""
    later, earlier = secsv[0].logs[(1, rw.MAIN)][0], secsv[0].logs[(0, rw.MAIN)][0]
    _, to, req1 = later.of("decrypt")[0]
    req0 = next(p for _, r, p in earlier.of("decrypt") if r == to)
    me = int(to.split(":")[1])
    client = fz.clone_sclient(secsv[0].before[1].clients[me])
    client.decrypt_layer(req1)
    _refused(lambda: client.decrypt_layer(req0), "round")
    fz.clone_sclient(secsv[0].before[1].clients[me]).decrypt_layer(req0)
    later, earlier = secretsv[0].logs[(1, rw.MAIN)][0], secretsv[0].logs[(0, rw.MAIN)][0]
    (_, to, p1), (_, _, a1) = later.of("output")[0], later.of("output")[1]
    outs = earlier.of("output")
    k = next(j for j in range(0, len(outs), 2) if outs[j][1] == to)
    p0, a0 = outs[k][2], outs[k + 1][2]
    me = int(to.split(":")[1])
    tclient = fz.clone_tclient(secretsv[0].before[1].clients[me])
    tclient.reconstruct(p1, a1)
    _refused(lambda: tclient.reconstruct(p0, a0), "round")
    fz.clone_tclient(secretsv[0].before[1].clients[me]).reconstruct(p0, a0)
