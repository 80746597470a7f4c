"""What a decrypting client may see: the rule, written once for HESV, SecSV and SecretSV.

Prop. 6.8 of Zheng, Cao and Yoshikawa's secure Shapley paper (VLDB 2023) keeps a client
from decrypting a layer's output of a model it *owns* and of its own samples. That is
not enough: a client knows more models than its own, and the first layer's output
``W·X_b + b`` is *linear* in another client's batch ``X_b`` with the model's matrix.
Whoever knows the matrix solves for the batch (the global model's first layer on a
digits batch gave every pixel back), and whoever knows the batch then solves for the
models.

The models a client ``d`` knows, as vectors over the run's models (the global model
``θ^t`` and the local models ``θ_i^t`` of every round ``t``):

* every global model ``θ^t`` (every client receives it in FedAvg);
* its own local models ``θ_d^t``;
* the aggregate ``θ^{t+1} = Σ_i ω_i^t θ_i^t`` (the next global model, public weights);
* every linear combination of these -- e.g. ``θ^{t+1} − ω_d θ_d^t``, the weighted model
  of everyone but ``d``.

A coalition ``S`` of round ``t`` is the vector ``v_S = Σ_{i∈S} ω_{i|S} θ_i^t`` (``θ^t``
for ``S = ∅``). Decrypting the first-layer outputs of coalitions ``S_1 .. S_m`` on the
same samples gives ``(Σ_k c_k W_{S_k}) X_b`` for every ``c``; if some non-zero
combination is a known model, ``d`` holds ``M X_b`` for a known ``M`` -- equations in the
samples, which accumulate over coalitions and rounds (the samples do not change).

**The rule.** For every client ``d`` and every test sample ``x`` of another client, let
``D`` be the span of the coalition vectors whose plain first-layer output on ``x`` ``d``
has decrypted and ``K_d`` the span of the models ``d`` knows: ``D ∩ K_d = {0}``. A batch
owner may decrypt outputs on its own samples only of models it knows (it learns nothing
it could not compute; an unknown model's outputs on its own data would give it the
model). Later layers take per-coalition hidden inputs, so there only a known model is
refused. An output that is *blinded* before decryption (a secret positive factor and
shift per sample, so that only the predicted label survives) adds no linear equation and
is exempt from the span, but a known model's blinded output still is refused (it would be
one bit of a known model's output per sample).

:class:`ModelSpace` holds the public facts (participants and FedAvg weights per round);
:class:`ClientView` one client's view, used by the client to refuse a request (and by tests to
check a schedule); :class:`Scheduler` the schedule the server follows.

Schedules (:class:`Scheduler`). In a round with ``k`` participants a client may take, on
one sample, coalitions spanning at most ``k − 2`` dimensions that avoid the models it
knows; the batch owner evaluates the models it knows on its own samples (``θ^t``,
``θ^{t+1}`` and the coalition of everybody but itself). Exact Shapley values need the
``2^k − 3`` other coalitions on every sample; whether they can be spread over the other
clients depends on ``k``, on how many clients stay out of a round and on the FedAvg
weights. The scheduler searches a placement before any work (larger coalitions first, the
client whose span grows least) and refuses, with :class:`UnsafeSchedule`, when it finds
none -- with every client in every round none exists for 3, 4 or 5 clients (an
exhaustive search). Batches that mix several
owners have no owner that knows their samples: under the rule, batches have one owner.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.errors import PolicyViolation, PrivacyWarning, ProtocolError

__all__ = ["ModelSpace", "ClientView", "Scheduler", "UnsafeSchedule", "SCHEDULES",
           "check_schedule"]

#: ``strict``: the rule below; ``paper``: Prop. 6.8 only (a PrivacyWarning says the leak).
SCHEDULES = ("strict", "paper")

FloatArray = NDArray[np.float64]
Owners = Sequence[int] | NDArray[Any]
_TOL = 1e-9


#: Placement steps the exhaustive search may take before a run is refused anyway.
SEARCH_NODES = 20_000


class _Exhausted(Exception):
    pass


class UnsafeSchedule(ValueError):
    """No client may decrypt an output without being able to solve for test data."""


@dataclass(frozen=True)
class ModelSpace:
    """The run's models as coordinates: ``θ^t`` and ``θ_i^t`` for every round ``t``.

    Parameters
    ----------
    rounds : sequence of (participants, weights)
        Per round, the participating client ids and their FedAvg weights (public).
    """

    rounds: tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]

    @classmethod
    def of(cls, rounds: Iterable[tuple[Sequence[int], Sequence[float] | NDArray[Any]]]
           ) -> ModelSpace:
        out = []
        for parts, weights in rounds:
            p = tuple(int(c) for c in parts)
            w = tuple(float(v) for v in weights)
            if len(p) != len(w) or not p:
                raise ValueError("each round needs participants aligned with weights")
            out.append((p, w))
        return cls(tuple(out))

    @classmethod
    def of_record(cls, record: Any) -> ModelSpace:
        """From a :class:`~fedsec.learning.record.TrainingRecord`."""
        return cls.of((r.participants, r.weights) for r in record.rounds)

    @property
    def dim(self) -> int:
        return sum(1 + len(p) for p, _ in self.rounds)

    def _offset(self, t: int) -> int:
        return sum(1 + len(p) for p, _ in self.rounds[:t])

    def global_model(self, t: int) -> FloatArray:
        v = np.zeros(self.dim)
        v[self._offset(t)] = 1.0
        return v

    def coalition(self, t: int, mask: int) -> FloatArray:
        """``v_S`` for ``mask`` (bit ``j`` = the round's ``j``-th participant); ``θ^t``
        for 0."""
        parts, weights = self.rounds[t]
        if not 0 <= mask < 1 << len(parts):
            raise ValueError(f"mask {mask} out of range for round {t}")
        if mask == 0:
            return self.global_model(t)
        v = np.zeros(self.dim)
        base = self._offset(t) + 1
        sel = [j for j in range(len(parts)) if mask >> j & 1]
        total = sum(weights[j] for j in sel)
        for j in sel:
            v[base + j] = weights[j] / total
        return v

    def known(self, client: int) -> FloatArray:
        """Rows spanning the models ``client`` knows (see the module docstring)."""
        rows = []
        for t, (parts, weights) in enumerate(self.rounds):
            base = self._offset(t)
            g = np.zeros(self.dim)
            g[base] = 1.0
            rows.append(g)
            agg = np.zeros(self.dim)
            agg[base + 1:base + 1 + len(parts)] = weights
            rows.append(agg / max(sum(weights), _TOL))
            if client in parts:
                own = np.zeros(self.dim)
                own[base + 1 + parts.index(client)] = 1.0
                rows.append(own)
        return np.array(rows)


def _rank(m: FloatArray) -> int:
    if m.size == 0:
        return 0
    return int(np.linalg.matrix_rank(m, tol=_TOL * max(1.0, float(np.abs(m).max()))))


@dataclass
class ClientView:
    """One client's view of a run: the models it knows and, per test sample of another
    client, the span of the coalitions whose plain first-layer output it decrypted.

    Samples are identified by their index in the pooled test set; ``owners`` gives the
    client holding each listed sample."""

    space: ModelSpace
    client: int
    _known: FloatArray = field(init=False)
    _rank_known: int = field(init=False)
    _history: dict[int, int] = field(default_factory=dict)  # sample -> span id
    _spans: dict[int, FloatArray] = field(default_factory=dict)  # span id -> rows
    _next: int = 1
    _knows: dict[bytes, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._known = self.space.known(self.client)
        self._rank_known = _rank(self._known)
        self._spans[0] = np.zeros((0, self.space.dim))

    def requested(self, t: int, mask: int) -> FloatArray:
        """The coalition vector of round ``t``, ``mask`` as another role named it
        (:class:`~fedsec.errors.ProtocolError` when the run has no such coalition)."""
        rounds = self.space.rounds
        if not 0 <= t < len(rounds) or not 0 <= mask < 1 << len(rounds[t][0]):
            raise ProtocolError("malformed request: round or coalition")
        return self.space.coalition(t, mask)

    def knows(self, v: FloatArray) -> bool:
        """Whether ``v`` is a model this client knows (in the span of its known models)."""
        key = v.tobytes()
        if key not in self._knows:
            self._knows[key] = _rank(np.vstack([self._known, v])) == self._rank_known
        return self._knows[key]

    def span_of(self, sample: int) -> FloatArray:
        """The coalition vectors this client decrypted on ``sample`` (rows)."""
        return self._spans[self._history.get(int(sample), 0)]

    def span_id(self, sample: int) -> int:
        """Which span ``sample`` shares with others (samples with one history share one)."""
        return self._history.get(int(sample), 0)

    def safe_span(self, span: FloatArray, v: FloatArray) -> bool:
        """Whether decrypting ``v`` on top of ``span`` keeps the rule (no known model's
        output becomes solvable)."""
        new = np.vstack([span, v])
        r = _rank(new)
        if r == len(span) and len(span):  # v adds nothing to what it decrypted
            return True
        return _rank(np.vstack([new, self._known])) == r + self._rank_known

    def refusal(self, v: FloatArray, samples: Sequence[int], owners: Owners, *,
                first_layer: bool, blinded: bool) -> str | None:
        """Why this client must not decrypt coalition ``v``'s output on ``samples``, or
        None when it may."""
        mine = np.asarray(owners, dtype=np.int64) == self.client
        if mine.all() and len(mine):
            if not self.knows(v):
                return ("its own samples with a model it does not know (it would solve for "
                        "the model)")
            return None
        if mine.any():
            return "a batch that mixes its own samples with other clients'"
        if self.knows(v):
            return "the output of a model it knows on other clients' samples"
        if not first_layer or blinded:
            return None
        for sid in {self._history.get(int(s), 0) for s in samples}:
            if not self.safe_span(self._spans[sid], v):
                return ("an output that, with outputs it decrypted before, gives a known "
                        "model's output on other clients' samples (a linear combination)")
        return None

    def record(self, v: FloatArray, samples: Sequence[int], owners: Owners, *,
               first_layer: bool, blinded: bool) -> None:
        """Add a decrypted output to the view (after :meth:`refusal` said None)."""
        if not first_layer or blinded:
            return
        mine = np.asarray(owners, dtype=np.int64) == self.client
        if mine.all():
            return  # outputs of known models on its own data: nothing new
        moved: dict[int, int] = {}
        for s in samples:
            sid = self._history.get(int(s), 0)
            if sid not in moved:
                span = np.vstack([self._spans[sid], v])
                if _rank(span) == len(self._spans[sid]):
                    moved[sid] = sid
                else:
                    moved[sid] = self._next
                    self._spans[self._next] = span
                    self._next += 1
            self._history[int(s)] = moved[sid]
        live = set(self._history.values()) | {0}
        for sid in [k for k in self._spans if k not in live]:
            del self._spans[sid]

    def check(self, v: FloatArray, samples: Sequence[int], owners: Owners, *,
              first_layer: bool, blinded: bool) -> None:
        """Refuse (:class:`~fedsec.errors.PolicyViolation`) or record the decryption."""
        why = self.refusal(v, samples, owners, first_layer=first_layer, blinded=blinded)
        if why is not None:
            raise PolicyViolation(f"refusing to decrypt {why}", check="view")
        self.record(v, samples, owners, first_layer=first_layer, blinded=blinded)

    def check_request(self, t: int, mask: int, samples: Any, owners: Any, m: int, *,
                      first_layer: bool) -> bool:
        """The rule on a decryption request another role sent: ``samples`` (``m``
        distinct pooled sample ids) of the one client in ``owners``. Malformed fields
        raise :class:`~fedsec.errors.ProtocolError`, a breach of the rule
        :class:`~fedsec.errors.PolicyViolation`; returns whether the request is a model
        this client knows on its own samples (it learns nothing from it)."""
        v = self.requested(t, mask)
        if not (isinstance(owners, list) and len(owners) == 1 and isinstance(owners[0], int)
                and isinstance(samples, list) and len(samples) == m
                and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 40
                        for x in samples) and len(set(samples)) == m):
            raise ProtocolError("malformed request: samples or owners")
        self.check(v, samples, [owners[0]] * m, first_layer=first_layer, blinded=False)
        return owners[0] == self.client and self.knows(v)

    def solvable_rank(self, sample: int) -> int:
        """``dim(D ∩ K)`` for one sample: how many independent known-model outputs on it
        this client can compute from what it decrypted (0 under the rule)."""
        span = self._spans[self._history.get(int(sample), 0)]
        if not len(span):
            return 0
        return _rank(span) + self._rank_known - _rank(np.vstack([span, self._known]))


class Scheduler:
    """Who decrypts what, under the rule, for the server that asks (P in SecSV and
    SecretSV, the server in HESV). It keeps a copy of every client's view; each client
    keeps and enforces its own.

    Parameters
    ----------
    space : ModelSpace
    n_clients : int
    owner : array of int
        The owner of every pooled test sample.
    """

    def __init__(self, space: ModelSpace, n_clients: int, owner: NDArray[Any]) -> None:
        self.space = space
        self.n = n_clients
        self.owner = np.asarray(owner, dtype=np.int64)
        self.views = [ClientView(space, c) for c in range(n_clients)]
        self._planned: dict[tuple[int, int, tuple[int, ...]], int] = {}
        self._exhausted = False

    def owner_of(self, samples: Sequence[int]) -> int | None:
        """The one owner of ``samples``, or None when they mix owners."""
        o = set(self.owner[np.asarray(samples, dtype=np.int64)].tolist())
        return int(o.pop()) if len(o) == 1 else None

    def owner_local(self, t: int, mask: int, samples: Sequence[int]) -> bool:
        """Whether the samples' owner knows coalition ``mask``'s model (and so evaluates it
        itself: decrypting it teaches the owner nothing)."""
        b = self.owner_of(samples)
        return b is not None and self.views[b].knows(self.space.coalition(t, mask))

    def _growth(self, view: ClientView, v: FloatArray, samples: Sequence[int]) -> int:
        span = view.span_of(int(samples[0]))
        return _rank(np.vstack([span, v])) - _rank(span)

    def _place(self, views: list[ClientView], t: int, mask: int, samples: Sequence[int],
               order: Sequence[int]) -> int | None:
        v = self.space.coalition(t, mask)
        owners = self.owner[np.asarray(samples, dtype=np.int64)]
        best: tuple[int, int] | None = None
        for c in order:
            view = views[c]
            if view.refusal(v, samples, owners, first_layer=True, blinded=False) is None:
                g = self._growth(view, v, samples)
                if best is None or g < best[0]:
                    best = (g, c)
        if best is None:
            return None
        views[best[1]].record(v, samples, owners, first_layer=True, blinded=False)
        return best[1]

    def plan(self, t: int, masks: Sequence[int], samples: Sequence[int], *,
             restarts: int = 24) -> None:
        """Place every coalition of ``masks`` on ``samples`` ahead of time (exact Shapley
        values: every coalition is known in advance), larger coalitions first, the
        decryptor whose span grows least; a few deterministic restarts. Raises
        :class:`UnsafeSchedule` (before any work) when no placement is found."""
        todo = [m for m in masks if not self.owner_local(t, m, samples)]
        todo.sort(key=lambda m: (-m.bit_count(), m))
        key = tuple(int(s) for s in samples)
        owners = self.owner[np.asarray(samples, dtype=np.int64)]
        start: dict[int, FloatArray] = {}
        for c, view in enumerate(self.views):  # each client's span on these samples
            sids = {view.span_id(int(s)) for s in samples}
            if len(sids) != 1:  # samples with different histories: place one by one
                return
            start[c] = view.span_of(int(samples[0]))
        vecs = {m: self.space.coalition(t, m) for m in todo}
        for attempt in range(restarts):
            spans = dict(start)
            placed: dict[int, int] = {}
            for i, m in enumerate(todo):
                shift = (attempt * 7 + i * (attempt + 1)) % self.n
                best: tuple[int, int] | None = None
                for k in range(self.n):
                    c = (k + shift) % self.n
                    view, v = self.views[c], vecs[m]
                    if (owners == c).any() or view.knows(v) or not view.safe_span(
                            spans[c], v):
                        continue
                    g = _rank(np.vstack([spans[c], v])) - _rank(spans[c])
                    if best is None or g < best[0]:
                        best = (g, c)
                if best is None:
                    break
                placed[m] = best[1]
                if best[0]:
                    spans[best[1]] = np.vstack([spans[best[1]], vecs[m]])
            else:
                for m, c in placed.items():
                    self.views[c].record(vecs[m], samples, owners, first_layer=True,
                                         blinded=False)
                    self._planned[(t, m, key)] = c
                return
        placed_dfs = self._search(todo, vecs, start, owners)
        if placed_dfs is None:
            self._refuse(t, next(iter(todo), 0), samples, searched=True)
        assert placed_dfs is not None
        for m, c in placed_dfs.items():
            self.views[c].record(vecs[m], samples, owners, first_layer=True, blinded=False)
            self._planned[(t, m, key)] = c

    def _search(self, todo: list[int], vecs: dict[int, FloatArray],
                start: dict[int, FloatArray], owners: NDArray[Any],
                budget: int = SEARCH_NODES) -> dict[int, int] | None:
        """Depth-first search over every placement (after the greedy restarts failed):
        a placement, or None when none exists -- or none was found within ``budget``
        steps (then the refusal says so)."""
        spans = dict(start)
        cands = {m: [c for c in range(self.n) if not (owners == c).any()
                     and not self.views[c].knows(vecs[m])] for m in todo}
        placed: dict[int, int] = {}
        steps = 0

        def dfs(i: int) -> bool:
            nonlocal steps
            steps += 1
            if steps > budget:
                raise _Exhausted
            if i == len(todo):
                return True
            m = todo[i]
            v = vecs[m]
            for c in cands[m]:
                if self.views[c].safe_span(spans[c], v):
                    old = spans[c]
                    if _rank(np.vstack([old, v])) > _rank(old):
                        spans[c] = np.vstack([old, v])
                    placed[m] = c
                    if dfs(i + 1):
                        return True
                    spans[c] = old
                    del placed[m]
            return False

        try:
            found = dfs(0)
        except _Exhausted:
            self._exhausted = True
            return None
        self._exhausted = False
        return placed if found else None

    def first(self, t: int, mask: int, samples: Sequence[int], turn: int = 0) -> int:
        """The client that decrypts (or, for a model the owner knows, evaluates) the first
        layer of coalition ``mask`` on ``samples``; raises :class:`UnsafeSchedule`."""
        if self.owner_local(t, mask, samples):
            b = self.owner_of(samples)
            assert b is not None
            return b
        key = (t, mask, tuple(int(s) for s in samples))
        if key in self._planned:
            return self._planned.pop(key)
        order = [(turn + c) % self.n for c in range(self.n)]
        c = self._place(self.views, t, mask, samples, order)
        if c is None:
            self._refuse(t, mask, samples)
        assert c is not None
        return c

    def later(self, t: int, mask: int, samples: Sequence[int], layer: int, n_layers: int,
              previous: int, turn: int = 0) -> int:
        """The decryptor of a later layer: not the previous one, not a client that knows
        the model, not the samples' owner at the last layer."""
        if self.owner_local(t, mask, samples):
            b = self.owner_of(samples)
            assert b is not None
            return b
        v = self.space.coalition(t, mask)
        b = self.owner_of(samples)
        for k in range(self.n):
            c = (turn + k) % self.n
            if c == previous or c == b or self.views[c].knows(v):
                continue
            return c
        self._refuse(t, mask, samples)
        raise AssertionError  # unreachable

    def chain(self, t: int, mask: int, samples: Sequence[int] | NDArray[Any], n_layers: int,
              turn: int = 0) -> list[int]:
        """Every layer's decrypting client for coalition ``mask`` on ``samples``."""
        rows = [int(v) for v in samples]
        out = [self.first(t, mask, rows, turn=turn)]
        for layer in range(1, n_layers):
            out.append(self.later(t, mask, rows, layer, n_layers, out[-1],
                                  turn=turn + layer))
        return out

    def _refuse(self, t: int, mask: int, samples: Sequence[int], searched: bool = False
                ) -> None:
        parts = self.space.rounds[t][0]
        how = ""
        if searched:
            how = (" (an exhaustive search found no placement)" if not self._exhausted
                   else f" (none found within {SEARCH_NODES:,} search steps)")
        raise UnsafeSchedule(
            f"no client may decrypt coalition {mask:#b} of round {t + 1} on client "
            f"{self.owner_of(samples)}'s samples without being able to solve for them: a "
            "client knows its own model and the global models, and with "
            f"{len(parts)} participants among {self.n} clients the coalitions' outputs "
            "cannot be spread so that no client can combine them into a known model's "
            f"output{how}. Evaluate fewer coalitions (an estimator with a small budget), add "
            "clients that do not train in every round, or pass schedule='paper' to accept "
            "the paper's Prop. 6.8 schedule and its leak (a PrivacyWarning says what it is).")

    def solvable(self) -> int:
        """The largest ``dim(D ∩ K)`` over every client and sample (0 under the rule)."""
        best = 0
        for c, view in enumerate(self.views):
            for s in np.flatnonzero(self.owner != c):
                best = max(best, view.solvable_rank(int(s)))
        return best


def check_schedule(schedule: Any, where: str) -> None:
    """Validate the ``schedule`` argument; warn (PrivacyWarning) for ``"paper"``."""
    if not isinstance(schedule, str):
        raise TypeError(f"The 'schedule' parameter of {where} must be a str. "
                        f"Got {type(schedule).__name__} instead.")
    if schedule not in SCHEDULES:
        raise ValueError(f"The 'schedule' parameter of {where} must be one of "
                         f"{', '.join(SCHEDULES)}. Got {schedule!r} instead.")
    if schedule == "paper":
        warnings.warn(
            f"{where}(schedule='paper') follows the paper's Prop. 6.8 only: a decrypting "
            "client may receive the first-layer output of a model it knows (the global "
            "model, its own, or a combination of the outputs it decrypts) on another "
            "client's samples, and can solve for those samples and then for other "
            "clients' models.", PrivacyWarning, stacklevel=3)
