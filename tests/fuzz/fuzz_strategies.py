"""Hypothesis strategies for hostile message metadata (structure-aware).

:func:`hostile_meta` starts from the metadata an honest role sent and, key by key, keeps
the value, drops it, nudges it (off by one, another type holding the same text or number,
a shorter string) or replaces it with arbitrary hostile JSON; it may add keys. Shrinking
then points at the one key and value a decoder mishandles.
"""

from __future__ import annotations

from typing import Any

from fuzz_mutations import HOSTILE_JSON
from hypothesis import strategies as st

__all__ = ["json_values", "nudged", "hostile_meta", "KNOWN_KEYS"]

#: Metadata keys some fedsec message uses: an added key is most interesting when another
#: message kind gives it a meaning.
KNOWN_KEYS = ("config", "session", "party", "parties", "ratio", "chunks", "name", "holder",
              "roster", "spec", "preset", "n", "primes", "scale_bits", "rotations",
              "conjugate", "names", "index", "fields")

_MISSING = object()


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value Python's parser can return, biased towards hostile ones."""
    leaf = st.one_of(
        st.sampled_from(HOSTILE_JSON),
        st.none(), st.booleans(),
        st.integers(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(),  # NaN and infinities included: json.loads accepts them
        st.text(max_size=40),
    )
    return st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=8)


def nudged(v: Any) -> st.SearchStrategy[Any]:
    """Plausible but wrong versions of a valid value ``v``."""
    if isinstance(v, bool):
        return st.sampled_from([not v, int(v), None, str(v).lower()])
    if isinstance(v, int):
        return st.one_of(st.integers(v - 3, v + 3), st.just(float(v)), st.just(str(v)),
                         st.just([v]), st.just(v + 2**64), st.just(-v - 1))
    if isinstance(v, float):
        return st.one_of(st.floats(), st.just(str(v)), st.just(int(v)), st.just([v]))
    if isinstance(v, str):
        return st.one_of(st.just(v[:-1]), st.just(v + "0"), st.just(v.upper()),
                         st.just(v * 2), st.just([v]), st.just({v: v}),
                         st.text(min_size=len(v), max_size=len(v)))
    if isinstance(v, list):
        elems = st.sampled_from(v) if v else json_values()
        return st.one_of(st.lists(elems, max_size=len(v) + 2),
                         st.lists(st.one_of(elems, json_values()), min_size=1,
                                  max_size=len(v) + 2),
                         st.just(v[:1] * 3))
    if isinstance(v, dict):
        return hostile_meta(v)
    return json_values()


def hostile_meta(valid: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Metadata derived from ``valid``: each key kept, dropped, nudged or replaced; maybe
    extra keys."""
    per_key = {k: st.one_of(st.just(v), st.just(_MISSING), nudged(v), json_values())
               for k, v in valid.items()}
    extra = st.dictionaries(st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=8)),
                            json_values(), max_size=2)

    def combine(kept: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
        out = dict(added)
        out.update({k: x for k, x in kept.items() if x is not _MISSING})
        return out

    return st.builds(combine, st.fixed_dictionaries(per_key), extra)
