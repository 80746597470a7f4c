"""Carry fedsec's ``bytes`` protocol messages over Flower's Message API (flwr 1.41).

This is the only kind of module in fedsec that imports :mod:`flwr` (Flower is an
optional dependency: ``pip install "fedsec[flower]"``). ``import fedsec`` never imports
it.

Encoding (measured on flwr 1.41.0, 20 blobs x 200 KB, deflate + inflate of the record
tree, which is what Flower does on every hop):

* raw ``Array`` in an ``ArrayRecord`` (``dtype="uint8"``, ``stype=RAW_STYPE``,
  ``data=blob``): ~8 ms + ~1.5 ms, no copy through NumPy, chunked by Flower into
  5 MiB ``ArrayChunk`` objects, so large blobs stream;
* ``Array(np.frombuffer(blob, np.uint8))``: same wire cost plus ``np.save``/``np.load``;
* ``ConfigRecord`` holding ``list[bytes]``: ~107 ms + ~27 ms and never chunked.

Hence blobs go into an ``ArrayRecord`` of raw ``Array`` objects (one per blob, keys
``"0"``, ``"1"``, ... in order) and small metadata into a ``ConfigRecord``.

The server side gets :func:`run_step`: one message round to a set of nodes, with a
short poll interval (``Grid.send_and_receive`` of the deployment grid sleeps 3 s
between polls) and a hard timeout, returning replies, error replies and missing nodes
separately so that a protocol can fail closed.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

with warnings.catch_warnings():
    # flwr 1.41 -> typer 0.20 -> click 8.5 emits a DeprecationWarning on import
    # (click.utils.get_binary_stream); harmless, but fatal under `-W error`.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, RecordDict
    from flwr.serverapp import Grid

from fedsec.errors import ProtocolError

__all__ = [
    "BLOBS_KEY",
    "META_KEY",
    "RAW_STYPE",
    "StepFailed",
    "SuperLinkUnavailable",
    "GRID_CALL_TIMEOUT",
    "TTL_GRACE",
    "StepResult",
    "get_blob",
    "get_blobs",
    "get_meta",
    "make_content",
    "put_blob",
    "put_blobs",
    "put_meta",
    "reply",
    "run_step",
    "wait_for_nodes",
]

#: ``Array.stype`` marking an opaque byte string (not an ``np.save`` payload).
RAW_STYPE = "fedsec.raw-bytes"
#: Default record names inside a message's ``RecordDict``.
BLOBS_KEY = "fedsec.blobs"
META_KEY = "fedsec.meta"

#: Seconds added to a step's timeout to make its messages' TTL (see :func:`run_step`).
TTL_GRACE = 10.0

_MetaValue = int | float | str | bytes | bool | list[int] | list[float] | list[str]


# --------------------------------------------------------------------------- records
def put_blobs(content: RecordDict, blobs: Sequence[bytes], key: str = BLOBS_KEY) -> None:
    """Store ``blobs`` (in order) in ``content[key]`` as an ``ArrayRecord``."""
    arrays: dict[str, Array] = {}
    for i, blob in enumerate(blobs):
        if not isinstance(blob, bytes | bytearray | memoryview):
            raise TypeError(f"blob {i} is {type(blob).__name__}, expected bytes")
        data = bytes(blob)
        arrays[str(i)] = Array(dtype="uint8", shape=(len(data),), stype=RAW_STYPE, data=data)
    content[key] = ArrayRecord(arrays, keep_input=False)


def get_blobs(content: RecordDict, key: str = BLOBS_KEY) -> list[bytes]:
    """Return the blobs stored by :func:`put_blobs`, in order.

    Raises :class:`~fedsec.errors.ProtocolError` if the record is missing or malformed.
    """
    try:
        record = content.array_records[key]
    except KeyError:
        raise ProtocolError(f"message has no blob record {key!r}") from None
    n = len(record)
    out: list[bytes] = []
    for i in range(n):
        arr = record.get(str(i))
        if arr is None:
            raise ProtocolError(f"blob record {key!r} lacks entry {i} of {n}")
        if arr.stype != RAW_STYPE or arr.dtype != "uint8" or arr.shape != (len(arr.data),):
            raise ProtocolError(f"blob record {key!r} entry {i} is not a raw byte blob")
        out.append(arr.data)
    return out


def put_blob(content: RecordDict, blob: bytes, key: str = BLOBS_KEY) -> None:
    """Store one blob (see :func:`put_blobs`)."""
    put_blobs(content, [blob], key)


def get_blob(content: RecordDict, key: str = BLOBS_KEY) -> bytes:
    """Return the single blob stored by :func:`put_blob`."""
    blobs = get_blobs(content, key)
    if len(blobs) != 1:
        raise ProtocolError(f"blob record {key!r} holds {len(blobs)} blobs, expected 1")
    return blobs[0]


def put_meta(content: RecordDict, meta: Mapping[str, _MetaValue], key: str = META_KEY) -> None:
    """Store small metadata (ints, floats, str, short bytes, lists) in a ``ConfigRecord``."""
    content[key] = ConfigRecord(dict(meta))


def get_meta(content: RecordDict, key: str = META_KEY) -> dict[str, Any]:
    """Return the metadata stored by :func:`put_meta` (empty dict if absent)."""
    record = content.config_records.get(key)
    return {} if record is None else dict(record)


def make_content(
    blobs: Sequence[bytes] = (), meta: Mapping[str, _MetaValue] | None = None
) -> RecordDict:
    """Build a ``RecordDict`` with ``blobs`` and ``meta`` under the default keys."""
    content = RecordDict()
    put_blobs(content, blobs)
    if meta is not None:
        put_meta(content, meta)
    return content


def reply(message: Message, content: RecordDict) -> Message:
    """ClientApp side: the reply to ``message`` carrying ``content``."""
    return Message(content, reply_to=message)


# ----------------------------------------------------------------------- server side
@dataclass
class StepResult:
    """Outcome of one message round (:func:`run_step`)."""

    replies: dict[int, RecordDict] = field(default_factory=dict)
    """node id -> reply content, for nodes that answered without error."""
    errors: dict[int, Error] = field(default_factory=dict)
    """node id -> ``Error`` of error replies (ClientApp raised, node unavailable...)."""
    missing: list[int] = field(default_factory=list)
    """Nodes whose instruction was delivered but that sent no reply by the deadline
    (e.g. a SuperNode killed without a clean shutdown: it stays "online" for up to
    2 x 30 s of missed heartbeats)."""
    undelivered: list[int] = field(default_factory=list)
    """Nodes whose instruction the SuperLink refused at send time (node offline or
    unknown, e.g. a SuperNode that shut down cleanly)."""
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors and not self.missing and not self.undelivered

    @property
    def failed_nodes(self) -> list[int]:
        return sorted({*self.errors, *self.missing, *self.undelivered})

    def raise_for_failures(self, step: str = "step") -> None:
        """Raise :class:`StepFailed` unless every node answered without error."""
        if not self.ok:
            raise StepFailed(step, self)


class StepFailed(ProtocolError):
    """Some nodes answered with an error or did not answer in time."""

    def __init__(self, step: str, result: StepResult) -> None:
        errs = {n: (e.code, e.reason) for n, e in result.errors.items()}
        super().__init__(
            f"{step}: errors={errs} missing={result.missing} undelivered={result.undelivered}"
        )
        self.step = step
        self.result = result


#: Longest a single call to the SuperLink (push, pull, node list) may block. Flower 1.41's
#: ServerApp retries a refused connection forever: without a bound, a SuperLink that died
#: or restarted would leave the run hanging with its result file at an intermediate stage.
GRID_CALL_TIMEOUT = 60.0


class SuperLinkUnavailable(ProtocolError):
    """A call to the SuperLink did not return in time (it stopped, restarted or hangs)."""


def _bounded(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """``fn()`` in a daemon thread; :class:`SuperLinkUnavailable` if it has not returned
    within ``timeout`` seconds (the thread is abandoned; it ends with the process)."""
    import threading

    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["error"] = exc

    t = threading.Thread(target=call, name=f"fedsec-grid-{what}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise SuperLinkUnavailable(f"the SuperLink did not answer a {what} within "
                                   f"{timeout:g}s (stopped or restarted?)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def wait_for_nodes(grid: Grid, count: int, timeout: float, poll_interval: float = 0.2) -> list[int]:
    """Wait until at least ``count`` nodes are connected; return ``count`` sorted ids.

    Raises ``TimeoutError`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        node_ids = sorted(_bounded(grid.get_node_ids, GRID_CALL_TIMEOUT, "node list"))
        if len(node_ids) >= count:
            return node_ids[:count]
        if time.monotonic() >= deadline:
            raise TimeoutError(f"only {len(node_ids)} of {count} nodes connected")
        time.sleep(poll_interval)


def run_step(
    grid: Grid,
    contents: Mapping[int, RecordDict],
    message_type: str,
    *,
    group_id: str = "",
    timeout: float = 60.0,
    poll_interval: float = 0.1,
    ttl: float | None = None,
    fail_fast: bool = False,
    on_reply: Callable[[int, Message], None] | None = None,
) -> StepResult:
    """Send ``contents[node_id]`` to every node and collect one reply per node.

    ``message_type`` is e.g. ``"query.hello"`` (dispatched to ``@app.query("hello")``
    in the ClientApp). Returns once every node has replied or after ``timeout``
    seconds; never raises because of a node.

    The message TTL defaults to ``timeout + TTL_GRACE`` seconds: long enough that an
    unanswered instruction is still alive at the deadline (and so reported in
    ``missing``), short enough that the SuperLink soon drops instructions nobody
    waits for. Were the TTL to lapse first, the SuperLink would answer the pull with
    an error reply ``MESSAGE_UNAVAILABLE`` (code 3) instead.

    With ``fail_fast``, return as soon as one node is undelivered or answers with
    an error (the nodes still pending are then listed in ``missing``): for protocols
    that need every party, waiting for the others is pointless.
    """
    start = time.monotonic()
    messages = [
        Message(
            content,
            dst_node_id=node_id,
            message_type=message_type,
            group_id=group_id,
            ttl=ttl if ttl is not None else timeout + TTL_GRACE,
        )
        for node_id, content in contents.items()
    ]
    node_order = list(contents)
    # push_messages sets each message's id before pushing; the deployment grid
    # returns ids in order with None for failed pushes, the simulation grid omits them.
    returned = [m for m in _bounded(lambda: grid.push_messages(messages),
                                    max(GRID_CALL_TIMEOUT, timeout), "push") if m]
    pending: dict[str, int] = {}
    returned_set = set(returned)
    for msg, node_id in zip(messages, node_order, strict=True):
        if msg.metadata.message_id in returned_set:
            pending[msg.metadata.message_id] = node_id
    if not pending and len(returned) == len(node_order):  # ids re-assigned: use order
        pending = dict(zip(returned, node_order, strict=True))
    result = StepResult()
    delivered = set(pending.values())
    result.undelivered = [n for n in node_order if n not in delivered]
    deadline = start + timeout
    while pending and not (fail_fast and result.undelivered):
        for msg in _pull(grid, pending):
            key = msg.metadata.reply_to_message_id
            if key not in pending:
                continue
            node_id = pending.pop(key)
            if msg.has_error():
                result.errors[node_id] = msg.error
            else:
                result.replies[node_id] = msg.content
            if on_reply is not None:
                on_reply(node_id, msg)
        if not pending or time.monotonic() >= deadline or (fail_fast and result.errors):
            break
        time.sleep(poll_interval)
    result.missing.extend(pending.values())
    result.missing.sort()
    result.elapsed = time.monotonic() - start
    return result


def _pull(grid: Grid, pending: Mapping[str, int]) -> Iterable[Message]:
    ids = list(pending)
    out: Iterable[Message] = _bounded(lambda: grid.pull_messages(ids), GRID_CALL_TIMEOUT,
                                      "pull")
    return out
