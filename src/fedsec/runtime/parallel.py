"""Parallel workers, as the runtime layer offers them.

The implementation lives in :mod:`fedsec.shapley.parallel` (the secure Shapley entry point
:func:`fedsec.secure_shapley` uses it, and a protocol module may not import the runtime
layer above it); this module re-exports it under the name earlier releases documented.
"""

from fedsec.shapley.parallel import (
    BACKENDS,
    default_workers,
    map_ordered,
    round_costs,
    shapley_in_parallel,
)

__all__ = ["BACKENDS", "default_workers", "map_ordered", "round_costs", "shapley_in_parallel"]
