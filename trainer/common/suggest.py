""""Did you mean": the closest known name to a mistyped one, for every message that
refuses a name (config fields and sections, regions, zones, machine and GPU types)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable


def _plain(text: str) -> str:
    return text.lower().replace("-", "_")


def closest(value: str, choices: Iterable[str],
            key: Callable[[str], str] = _plain, cutoff: float = 0.75) -> str | None:
    """The choice closest to `value` (compared by `key`: case and `-`/`_` aside by
    default), or None when none is close: one whose key starts with the value's key
    plus `_` first (a GPU type by its model), else difflib's best at `cutoff` and above."""
    by_key = {key(c): c for c in choices}
    wanted = key(value)
    same = [k for k in by_key if k == wanted or k.startswith(wanted + "_")]
    found = same or difflib.get_close_matches(wanted, list(by_key), n=1, cutoff=cutoff)
    return by_key[found[0]] if found else None


def did_you_mean(value: str, choices: Iterable[str],
                 key: Callable[[str], str] = _plain, cutoff: float = 0.75) -> str:
    """` (did you mean X?)` for the closest of `choices` to a mistyped `value` ("" if none
    is close)."""
    found = closest(value, choices, key, cutoff)
    return f" (did you mean {found}?)" if found else ""
