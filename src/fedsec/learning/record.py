"""What federated training leaves behind for contribution evaluation (Zheng et al., Sec. 3).

For every round ``t`` a :class:`RoundRecord` keeps the global model ``θ^t`` the clients
started from, the participants ``I^t``, their local models ``θ_i^t`` and aggregation
weights ``ω_i^t`` (FedAvg: local data sizes). From these, :meth:`RoundRecord.model` builds
``θ_S^t`` for any subset ``S``: ``θ^t`` when ``S`` is empty, else
``Σ_{i∈S} ω_{i|S} θ_i^t`` with ``ω_{i|S} = ω_i / Σ_{j∈S} ω_j``.

:class:`TrainingRecord` serialises to bytes (a numpy ``.npz`` archive without pickles,
plus a JSON header) so that later (secure) protocols and other processes can consume it.
Decoding is defensive: anything malformed raises :class:`~fedsec.errors.ProtocolError`.

A model trained outside fedsec gets its record from what its training kept:
:meth:`TrainingRecord.from_client_models` (per-round lists of client weights, participants
and aggregation weights; the global models given or computed by FedAvg) and
:meth:`TrainingRecord.from_flower` (the record Flower's
:class:`~fedsec.runtime.flower_shapley.RecordingFedAvg` keeps at the server).
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.errors import ProtocolError
from fedsec.learning.model import ModelSpec, Params, aggregate

__all__ = ["RoundRecord", "TrainingRecord", "RECORD_FORMAT"]

RECORD_FORMAT = "fedsec.training-record/1"
MAX_RECORD_BYTES = 1 << 31  # refuse archives beyond 2 GiB


@dataclass(frozen=True)
class RoundRecord:
    """One FedAvg round: ``θ^t``, ``I^t``, ``θ_i^t`` and ``ω_i^t`` (aligned with ``I^t``)."""

    global_params: Params
    participants: tuple[int, ...]
    local_params: tuple[Params, ...]
    weights: NDArray[np.float64]

    def __post_init__(self) -> None:
        if len(self.participants) != len(self.local_params) or (
                len(self.participants) != len(self.weights)):
            raise ValueError("participants, local_params and weights must align.")
        if len(set(self.participants)) != len(self.participants):
            raise ValueError("participants must be distinct.")
        if list(self.participants) != sorted(self.participants):
            raise ValueError("participants must be sorted by client id.")

    def model(self, subset: Iterable[int]) -> Params:
        """``θ_S^t`` for a set ``S`` of client ids (a subset of the participants)."""
        s = sorted(set(subset))
        if not s:
            return [np.asarray(p, dtype=np.float64) for p in self.global_params]
        pos = {c: j for j, c in enumerate(self.participants)}
        missing = [c for c in s if c not in pos]
        if missing:
            raise ValueError(f"Clients {missing} did not take part in this round.")
        idx = [pos[c] for c in s]
        return list(aggregate([self.local_params[j] for j in idx], self.weights[idx]))

    def model_of_mask(self, mask: int) -> Params:
        """``θ_S^t`` where bit ``j`` of ``mask`` selects ``participants[j]``."""
        return self.model(c for j, c in enumerate(self.participants) if mask >> j & 1)


@dataclass(frozen=True)
class TrainingRecord:
    """All rounds of one federated training run and the final model ``θ^{T+1}``."""

    spec: ModelSpec
    n_clients: int
    rounds: tuple[RoundRecord, ...]
    final_params: Params
    meta: dict[str, Any] | None = None

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    # ------------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """Serialise as an ``.npz`` archive (no pickles) with a JSON header."""
        header = {"format": RECORD_FORMAT, "spec": self.spec.to_json(),
                  "n_clients": self.n_clients, "meta": self.meta or {},
                  "rounds": [{"participants": list(r.participants),
                              "weights": [float(w) for w in r.weights]} for r in self.rounds]}
        arrays: dict[str, NDArray[Any]] = {
            "header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)}
        for k, p in enumerate(self.final_params):
            arrays[f"final/{k}"] = np.asarray(p)
        for t, r in enumerate(self.rounds):
            for k, p in enumerate(r.global_params):
                arrays[f"r{t}/global/{k}"] = np.asarray(p)
            for j, model in enumerate(r.local_params):
                for k, p in enumerate(model):
                    arrays[f"r{t}/local/{j}/{k}"] = np.asarray(p)
        buf = io.BytesIO()
        np.savez(buf, allow_pickle=False, **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> TrainingRecord:
        """Parse :meth:`to_bytes` output; ``ProtocolError`` on anything malformed."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError("A training record must be bytes.")
        if len(data) > MAX_RECORD_BYTES:
            raise ProtocolError("Training record exceeds the size limit.")
        try:
            with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as npz:
                files = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, NotImplementedError,
                RuntimeError, struct.error, zlib.error) as exc:
            raise ProtocolError(f"Training record is not a valid archive: {exc}") from None
        try:
            header = json.loads(bytes(files.pop("header")).decode())
            if header.get("format") != RECORD_FORMAT:
                raise ProtocolError(f"Unknown training-record format {header.get('format')!r}.")
            spec = ModelSpec.from_json(header["spec"])
            n_shapes = len(spec.param_shapes())

            def params(prefix: str) -> Params:
                ps = [files.pop(f"{prefix}/{k}") for k in range(n_shapes)]
                spec.check_params(ps)
                if any(p.dtype.kind != "f" or not np.isfinite(p).all() for p in ps):
                    raise ProtocolError("Model parameters must be finite floats.")
                return ps

            rounds = []
            for t, rh in enumerate(header["rounds"]):
                parts = tuple(int(c) for c in rh["participants"])
                weights = np.asarray(rh["weights"], dtype=np.float64)
                local = tuple(params(f"r{t}/local/{j}") for j in range(len(parts)))
                rounds.append(RoundRecord(params(f"r{t}/global"), parts, local, weights))
            final = params("final")
            n_clients = int(header["n_clients"])
            if files:
                raise ProtocolError(f"Unexpected arrays in training record: {sorted(files)[:3]}")
            rec = cls(spec, n_clients, tuple(rounds), final, dict(header.get("meta", {})))
            rec.validate()
            return rec
        except ProtocolError:
            raise
        except (KeyError, ValueError, TypeError, UnicodeDecodeError, AttributeError) as exc:
            raise ProtocolError(f"Malformed training record: {exc!r}") from None

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_client_models(cls, spec: Any, local_models: Sequence[Any], *,
                           participants: Sequence[Sequence[int]] | None = None,
                           weights: Sequence[Any] | None = None,
                           global_models: Sequence[Any] | None = None,
                           initial: Any = None, n_clients: int | None = None,
                           meta: dict[str, Any] | None = None) -> TrainingRecord:
        """A record from the client models of a training run done outside fedsec.

        Parameters
        ----------
        spec : ModelSpec or model
            The architecture; a PyTorch ``nn.Sequential`` or fitted scikit-learn
            classifier is read by :func:`fedsec.learning.adapters.model_spec`.
        local_models : sequence, one entry per round ``t``
            The local models ``θ_i^t`` of round ``t``: a sequence aligned with
            ``participants[t]`` (clients ``0..k-1`` when ``participants`` is not given),
            or a mapping ``{client_id: model}``. A model is a parameter list in the
            spec's order (numpy arrays or tensors), a PyTorch ``state_dict``, a PyTorch
            module or a fitted scikit-learn classifier
            (:func:`~fedsec.learning.adapters.as_params`).
        participants : sequence of sequences of int, optional
            ``I^t``, 0-based client ids per round (default: the mapping's keys, or
            ``0..k-1``).
        weights : sequence, optional
            FedAvg's aggregation weights ``ω_i^t`` per round (usually each client's number
            of training samples): a sequence aligned with the participants (with the
            mapping's order when ``local_models[t]`` is a mapping and ``participants`` is
            not given) or a mapping ``{client_id: weight}``; default: equal weights.
        global_models : sequence, optional
            ``θ^t``, the model the clients started round ``t`` from, for every round
            (``T`` entries), optionally followed by the final model ``θ^{T+1}``
            (``T + 1`` entries). Default: computed by FedAvg from ``initial``:
            ``θ^1 = initial`` and ``θ^{t+1} = Σ_i ω_i^t θ_i^t / Σ_i ω_i^t`` (a round
            without participants keeps ``θ^t``). Give them when the server aggregated
            otherwise (server learning rate, momentum, secure aggregation rounding).
        initial : model, optional
            ``θ^1`` (required when ``global_models`` is not given). It is the empty
            coalition's model of round 1: the round-1 Shapley values measure the gain
            over it.
        n_clients : int, optional
            Number of clients (default: the largest participant id + 1); clients with
            test data who never trained count too.
        meta : dict, optional
            Free-form JSON-serialisable notes kept with the record.

        Returns
        -------
        TrainingRecord
        """
        from fedsec.learning.adapters import as_params, model_spec

        where = "TrainingRecord.from_client_models"
        if not isinstance(spec, ModelSpec):
            spec = model_spec(spec)
        if isinstance(local_models, str | bytes | Mapping) or not isinstance(
                local_models, Sequence) or len(local_models) == 0:
            raise TypeError(f"The 'local_models' parameter of {where} must be a non-empty "
                            f"sequence with one entry per round. Got "
                            f"{type(local_models).__name__} instead.")
        t_rounds = len(local_models)
        for name, value in (("participants", participants), ("weights", weights)):
            if value is not None and (not isinstance(value, Sequence) or len(value) != t_rounds):
                raise ValueError(f"The '{name}' parameter of {where} must have one entry per "
                                 f"round ({t_rounds}). Got {value!r:.80} instead.")
        rounds_in: list[tuple[list[int], list[Params], list[float]]] = []
        for t, models in enumerate(local_models):
            ids, ps = _round_models(models, None if participants is None else participants[t],
                                    t, where)
            ps = [as_params(m, spec, what=f"local_models[{t}][{j}] of {where}")
                  for j, m in enumerate(ps)]
            ws = _round_weights(None if weights is None else weights[t], ids, t, where)
            order = sorted(range(len(ids)), key=ids.__getitem__)
            rounds_in.append(([ids[j] for j in order], [ps[j] for j in order],
                              [ws[j] for j in order]))
        n = max((max(ids) + 1 for ids, _, _ in rounds_in if ids), default=1)
        if n_clients is not None:
            if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < n:
                raise ValueError(f"The 'n_clients' parameter of {where} must be an int >= {n} "
                                 f"(the largest client id + 1). Got {n_clients!r} instead.")
            n = n_clients
        if global_models is not None:
            if initial is not None:
                raise ValueError(f"{where}: give 'global_models' or 'initial', not both.")
            if not isinstance(global_models, Sequence) or len(global_models) not in (
                    t_rounds, t_rounds + 1):
                raise ValueError(f"The 'global_models' parameter of {where} must hold T = "
                                 f"{t_rounds} or T + 1 models.")
            globals_ = [as_params(g, spec, what=f"global_models[{t}] of {where}")
                        for t, g in enumerate(global_models)]
        elif initial is None:
            raise ValueError(f"{where} needs 'global_models' (θ^t per round) or 'initial' "
                             "(θ^1, from which FedAvg computes the others).")
        else:
            globals_ = [as_params(initial, spec, what=f"'initial' of {where}")]
        rounds = []
        for t, (ids, ps, ws) in enumerate(rounds_in):
            rnd = RoundRecord(globals_[t], tuple(ids), tuple(ps),
                              np.asarray(ws, dtype=np.float64))
            rounds.append(rnd)
            if len(globals_) == t + 1:  # θ^{t+1}: given, else FedAvg of this round
                globals_.append(rnd.model(ids) if ids else globals_[t])
        info = dict(meta or {})
        info.setdefault("global_models", "given" if global_models is not None else "fedavg")
        rec = cls(spec, n, tuple(rounds), globals_[t_rounds], info)
        try:
            rec.validate()
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return rec

    @classmethod
    def from_flower(cls, strategy: Any, final_arrays: Any = None,
                    meta: dict[str, Any] | None = None) -> TrainingRecord:
        """The record of Flower's :class:`~fedsec.runtime.flower_shapley.RecordingFedAvg`.

        **Trusted-server setting**: that strategy receives every client's local model at
        the server (as Flower's FedAvg does), so whoever runs the server has already
        seen what the secure protocols hide from the servers; valuing the clients with
        HESV, SecSV or SecretSV afterwards still keeps each client's *test data*
        private. Where the server must not see local models, train with secure
        aggregation instead (:mod:`fedsec.runtime.flower_fedavg`: each client keeps its
        own part of the record) and run the protocol on Flower over those parts.

        Parameters
        ----------
        strategy : RecordingFedAvg
            The strategy after ``strategy.start(...)``.
        final_arrays : flwr ArrayRecord, optional
            ``θ^{T+1}`` (``result.arrays`` from ``start``); default: the last aggregate.
        meta : dict, optional
            Notes kept with the record.

        Returns
        -------
        TrainingRecord
        """
        build = getattr(strategy, "training_record", None)
        if not callable(build):
            raise TypeError("The 'strategy' parameter of TrainingRecord.from_flower must be "
                            "fedsec's RecordingFedAvg (fedsec.runtime.flower_shapley). Got "
                            f"{type(strategy).__name__} instead.")
        info = dict(meta or {})
        info.setdefault("setting", "trusted-server")
        rec = build(final_arrays, info)
        if not isinstance(rec, TrainingRecord):
            raise TypeError("strategy.training_record() did not return a TrainingRecord.")
        return rec

    @property
    def first_round(self) -> int:
        """Index of ``rounds[0]`` in the run this record was cut from (0 for a whole run)."""
        return int((self.meta or {}).get("first_round", 0))

    def slice(self, start: int, stop: int) -> TrainingRecord:
        """Rounds ``start..stop-1`` as a record of their own (e.g. to evaluate rounds in
        parallel). Its final model is ``θ^{stop}`` (the next round's global model), and
        ``first_round`` keeps the rounds' position, so per-round randomness derived from
        it is the same as in the whole record."""
        if not 0 <= start < stop <= self.n_rounds:
            raise ValueError(f"A slice of rounds must satisfy 0 <= start < stop <= "
                             f"{self.n_rounds}. Got {start}..{stop} instead.")
        final = self.final_params if stop == self.n_rounds else self.rounds[stop].global_params
        meta = dict(self.meta or {})
        meta["first_round"] = self.first_round + start
        return TrainingRecord(self.spec, self.n_clients, self.rounds[start:stop], final, meta)

    def validate(self) -> None:
        """Check ids, weights and shapes (``ValueError``)."""
        if self.n_clients < 1:
            raise ValueError("n_clients must be >= 1.")
        self.spec.check_params(self.final_params)
        for r in self.rounds:
            if r.participants and (min(r.participants) < 0 or
                                   max(r.participants) >= self.n_clients):
                raise ValueError("Participant ids must lie in 0..n_clients-1.")
            if not np.isfinite(r.weights).all() or np.any(r.weights < 0):
                raise ValueError("Aggregation weights must be finite and >= 0.")
            if len(r.participants) and r.weights.sum() <= 0:
                raise ValueError("Aggregation weights must not all be 0.")
            self.spec.check_params(r.global_params)
            for m in r.local_params:
                self.spec.check_params(m)


def participants_mask(participants: Sequence[int], subset: Iterable[int]) -> int:
    """Bitmask over ``participants`` for the client ids in ``subset``."""
    pos = {c: j for j, c in enumerate(participants)}
    mask = 0
    for c in subset:
        mask |= 1 << pos[c]
    return mask


def _round_models(models: Any, ids: Sequence[int] | None, t: int, where: str
                  ) -> tuple[list[int], list[Any]]:
    """Client ids and models of round ``t`` (a mapping, or a sequence with ``ids``)."""
    if isinstance(models, Mapping):
        keys = list(models)
        if ids is not None and sorted(int(c) for c in ids) != sorted(int(c) for c in keys):
            raise ValueError(f"local_models[{t}] of {where} has clients {sorted(keys)} but "
                             f"participants[{t}] lists {sorted(ids)}.")
        out_ids = keys if ids is None else list(ids)
        out = [models[c] for c in out_ids]
    elif isinstance(models, Sequence) and not isinstance(models, str | bytes):
        out = list(models)
        out_ids = list(range(len(out))) if ids is None else list(ids)
        if len(out_ids) != len(out):
            raise ValueError(f"participants[{t}] of {where} lists {len(out_ids)} clients but "
                             f"local_models[{t}] holds {len(out)} models.")
    else:
        raise TypeError(f"local_models[{t}] of {where} must be a sequence of client models "
                        f"or a mapping {{client_id: model}}. Got {type(models).__name__}.")
    clean = []
    for c in out_ids:
        if isinstance(c, bool) or not isinstance(c, int | np.integer) or c < 0:
            raise ValueError(f"Client ids of {where} must be ints >= 0 (0-based). Got {c!r} "
                             f"in round {t}.")
        clean.append(int(c))
    if len(set(clean)) != len(clean):
        raise ValueError(f"Round {t} of {where} lists a client twice: {clean}.")
    return clean, out


def _round_weights(ws: Any, ids: list[int], t: int, where: str) -> list[float]:
    if ws is None:
        return [1.0] * len(ids)
    if isinstance(ws, Mapping):
        try:
            vals = [ws[c] for c in ids]
        except KeyError as exc:
            raise ValueError(f"weights[{t}] of {where} has no weight for client {exc}.") from None
    else:
        vals = list(np.asarray(ws, dtype=np.float64).reshape(-1))
        if len(vals) != len(ids):
            raise ValueError(f"weights[{t}] of {where} must hold one weight per participant "
                             f"({len(ids)}). Got {len(vals)} instead.")
    out = [float(v) for v in vals]
    if not all(np.isfinite(v) and v >= 0 for v in out) or (out and sum(out) <= 0):
        raise ValueError(f"weights[{t}] of {where} must be finite, >= 0 and not all 0. "
                         f"Got {out} instead.")
    return out
