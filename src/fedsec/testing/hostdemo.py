"""Step functions for testing :mod:`fedsec.runtime.node_host` (a counter per run)."""

from __future__ import annotations

import os
from typing import Any

from fedsec.errors import ProtocolError
from fedsec.runtime.node_host import RunState


def count(blobs: list[bytes], meta: dict[str, Any], state: RunState
          ) -> tuple[list[bytes], dict[str, Any]]:
    """Add ``meta['add']`` to this run's counter; answer the counter and the host's pid."""
    state.data["n"] = state.data.get("n", 0) + int(meta.get("add", 1))
    return [b"".join(blobs)[::-1]], {"n": state.data["n"], "pid": os.getpid()}


def finish(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    """End the run on this node."""
    state.done = True
    return [], {"n": state.data.get("n", 0)}


def fail(blobs: list[bytes], meta: dict[str, Any], state: RunState
         ) -> tuple[list[bytes], dict[str, Any]]:
    """A step that refuses its input."""
    raise ProtocolError("refused: secret detail 1234")
