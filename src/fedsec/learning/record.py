"""What federated training leaves behind for contribution evaluation (Zheng et al., Sec. 3).

For every round ``t`` a :class:`RoundRecord` keeps the global model ``θ^t`` the clients
started from, the participants ``I^t``, their local models ``θ_i^t`` and aggregation
weights ``ω_i^t`` (FedAvg: local data sizes). From these, :meth:`RoundRecord.model` builds
``θ_S^t`` for any subset ``S``: ``θ^t`` when ``S`` is empty, else
``Σ_{i∈S} ω_{i|S} θ_i^t`` with ``ω_{i|S} = ω_i / Σ_{j∈S} ω_j``.

:class:`TrainingRecord` serialises to bytes (a numpy ``.npz`` archive without pickles,
plus a JSON header) so that later (secure) protocols and other processes can consume it.
Decoding is defensive: anything malformed raises :class:`~fedsec.errors.ProtocolError`.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from collections.abc import Iterable, Sequence
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
