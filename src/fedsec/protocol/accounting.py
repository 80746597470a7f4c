"""What a protocol costs: real bytes per role and message, and time by kind of work.

* :class:`Clock` -- a role's own seconds by kind of work: ``with self.clock("arithmetic"):``.
  Every role owns one; nobody passes it in. The kinds are the columns of the Shapley
  paper's (Xia et al.) Table 2: ``arithmetic`` (homomorphic or share arithmetic),
  ``encryption``, ``decryption``, ``share_generation``; ``other`` for the rest.
* :class:`Accounting` -- a run's bytes per (sender, receiver, kind), counted by the
  in-process network (:class:`fedsec.protocol.network.Network`) from the *serialized
  bytes* that crossed each role boundary (never an estimate), plus the roles' clocks
  (:meth:`Accounting.add_clock`).

Communication time is not measured (everything runs in one process); it is derived from the
bytes at a stated simulated bandwidth, as the paper does, by :meth:`Accounting.split`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TIME_KINDS", "DEFAULT_BANDWIDTH_MBPS", "Clock", "Accounting"]

TIME_KINDS: tuple[str, ...] = ("arithmetic", "encryption", "decryption", "share_generation",
                               "other")
#: Simulated link speed for the communication column (megabits per second).
DEFAULT_BANDWIDTH_MBPS = 1000.0


@contextmanager
def _timed(seconds: dict[str, float], kind: str) -> Iterator[None]:
    if kind not in seconds:
        raise ValueError(f"kind must be one of {TIME_KINDS}. Got {kind!r} instead.")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        seconds[kind] += time.perf_counter() - t0


class Clock:
    """A role's seconds by kind of work (``TIME_KINDS``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(TIME_KINDS, 0.0)

    def __call__(self, kind: str) -> AbstractContextManager[None]:
        return _timed(self.seconds, kind)

    def reset(self) -> dict[str, float]:
        """The seconds so far, and start again from zero."""
        out = self.seconds
        self.seconds = dict.fromkeys(TIME_KINDS, 0.0)
        return out

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


@dataclass
class Accounting:
    """Bytes per (sender, receiver, kind) and seconds per kind of work."""

    bytes_by_message: dict[tuple[str, str, str], int] = field(default_factory=dict)
    messages: dict[tuple[str, str, str], int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIME_KINDS, 0.0))

    def message(self, sender: str, receiver: str, kind: str, payload: bytes) -> bytes:
        """Count ``payload`` (the bytes that cross the boundary) and return it unchanged."""
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise TypeError(f"payload must be bytes. Got {type(payload).__name__} instead.")
        key = (sender, receiver, kind)
        self.bytes_by_message[key] = self.bytes_by_message.get(key, 0) + len(payload)
        self.messages[key] = self.messages.get(key, 0) + 1
        return bytes(payload)

    def timed(self, kind: str) -> AbstractContextManager[None]:
        """Seconds of work of one kind done by the runner itself (not by a role)."""
        return _timed(self.seconds, kind)

    def add_clock(self, clock: Clock | dict[str, float]) -> None:
        """Add a role's seconds (a :class:`Clock` or its ``seconds``)."""
        secs = clock.seconds if isinstance(clock, Clock) else clock
        for kind, s in secs.items():
            self.seconds[kind] = self.seconds.get(kind, 0.0) + s

    def merge(self, other: Accounting) -> None:
        """Add another accounting (e.g. of a round computed in another process)."""
        for k, v in other.bytes_by_message.items():
            self.bytes_by_message[k] = self.bytes_by_message.get(k, 0) + v
        for k, n in other.messages.items():
            self.messages[k] = self.messages.get(k, 0) + n
        for kind, s in other.seconds.items():
            self.seconds[kind] = self.seconds.get(kind, 0.0) + s

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_message.values())

    def bytes_by_role(self) -> dict[str, dict[str, int]]:
        """``{role: {"sent": n, "received": n}}``; a role is the name before any ``:``."""
        out: dict[str, dict[str, int]] = {}
        for (snd, rcv, _), n in self.bytes_by_message.items():
            for role, way in ((snd.split(":")[0], "sent"), (rcv.split(":")[0], "received")):
                entry = out.setdefault(role, {"sent": 0, "received": 0})
                entry[way] += n
        return out

    def communication_seconds(self, bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS) -> float:
        if not bandwidth_mbps > 0:
            raise ValueError(f"The 'bandwidth_mbps' parameter must be > 0. "
                             f"Got {bandwidth_mbps!r} instead.")
        return self.total_bytes * 8 / (bandwidth_mbps * 1e6)

    def split(self, bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS) -> dict[str, float]:
        """The Table 2 time split, communication derived from the bytes."""
        out = dict(self.seconds)
        out["communication"] = self.communication_seconds(bandwidth_mbps)
        out["total"] = sum(out.values())
        return out

    def to_dict(self, bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS) -> dict[str, Any]:
        return {
            "bandwidth_mbps": bandwidth_mbps,
            "time_split_seconds": self.split(bandwidth_mbps),
            "bytes_total": self.total_bytes,
            "bytes_by_role": self.bytes_by_role(),
            "messages": [{"sender": s, "receiver": r, "kind": k, "count": self.messages[(s, r, k)],
                          "bytes": n} for (s, r, k), n in sorted(self.bytes_by_message.items())],
        }
