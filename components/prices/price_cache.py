"""The prices read from the catalog, kept a day per region where the user keeps caches
(`$XDG_CACHE_HOME/gpu-pipeline/prices/<date>/<region>.json`, else under `~/.cache`): the
catalog is read at most once a day for a region, and the newest day stands in when it
cannot be read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.common import files

FORMAT = 1


def cache_root() -> Path:
    """Where the cached prices are (read at each call: a test or a user may move it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-pipeline" / "prices"


def read(region: str, day: str) -> dict[str, Any] | None:
    """The prices cached for `region` on `day` (YYYY-MM-DD), None if none (or unreadable)."""
    try:
        found = files.read_json(cache_root() / day / f"{region}.json")
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("format") == FORMAT else None


def newest(region: str, before: str) -> dict[str, Any] | None:
    """The newest prices cached for `region` on a day before `before`, None if none."""
    root = cache_root()
    days = sorted((p.name for p in root.iterdir() if p.is_dir() and p.name < before),
                  reverse=True) if root.is_dir() else []
    return next((found for day in days for found in [read(region, day)] if found), None)


def write(region: str, day: str, entry: dict[str, Any]) -> None:
    """Keeps `entry` as `region`'s prices of `day`; a cache that cannot be written is left
    (the prices were read; the next run reads them again)."""
    try:
        files.write_json(cache_root() / day / f"{region}.json", {"format": FORMAT, **entry})
    except OSError:
        pass
