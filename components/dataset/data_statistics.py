"""The prepared data's statistics beside its per-class counts: image formats and sizes as
the source stores them, and duplicates within and across splits (exact: the same bytes;
near: perceptual hashes within a few bits).

They go into the manifest (`statistics`), the dataset's report and, with the model, into
`data_statistics.json`, which the next run's data checks (`drift`) compare with.
"""

from __future__ import annotations

import collections
import math
import statistics as stats
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from components.dataset.image_facts import hamming
from components.dataset.written_shards import Noted

#: Duplicates listed by name in the manifest (the counts cover them all).
LISTED = 50

#: The splits in the order the statistics list them, whichever order an engine wrote in.
SPLITS = ("train", "validation", "test")

#: The split pairs looked at for leakage: an image of the first also in the second.
PAIRS = (("test", "train"), ("validation", "train"), ("test", "validation"))


def size_bucket(width: int, height: int) -> int:
    """The octave of an image's longer side: the power of two it is at most (32, 64...)."""
    return 1 << max(0, math.ceil(math.log2(max(width, height, 1))))


def _spread(values: Sequence[int]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p5": at(0.05), "median": stats.median(ordered), "p95": at(0.95)}


def _chunks(distance: int) -> list[tuple[int, int]]:
    """`distance + 1` bit ranges covering the 64 bits: two hashes within `distance` bits
    agree on at least one of them (pigeonhole), so only images sharing a range's value
    are compared (multi-index hashing)."""
    pieces = distance + 1
    edges = [round(i * 64 / pieces) for i in range(pieces + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _near_matches(queries: list[Noted], others: list[Noted], distance: int
                  ) -> Iterable[tuple[Noted, Noted, int]]:
    """Each query's closest image of `others` within `distance` bits (dHash), if any."""
    chunks = _chunks(distance)
    index: list[dict[int, list[int]]] = [collections.defaultdict(list) for _ in chunks]
    for position, item in enumerate(others):
        for table, (start, end) in zip(index, chunks, strict=True):
            table[(item[7] >> start) & ((1 << (end - start)) - 1)].append(position)
    for query in queries:
        candidates = {p for table, (start, end) in zip(index, chunks, strict=True)
                      for p in table.get((query[7] >> start) & ((1 << (end - start)) - 1), ())}
        best = min(((hamming(query[7], others[p][7]), p) for p in candidates), default=None)
        if best is not None and best[0] <= distance:
            yield query, others[best[1]], best[0]


def duplicates(noted: Sequence[Noted], near_distance: int) -> dict[str, Any]:
    """Duplicates within each split (the same bytes) and across splits (`PAIRS`: the same
    bytes, or dHashes within `near_distance` bits), counted and the first `LISTED` named.
    """
    by_split: dict[str, list[Noted]] = {s: [] for s in SPLITS}
    for item in sorted(noted, key=lambda item: item[1]):  # engines write in their own order
        by_split[item[0]].append(item)
    within = {}
    for split, items in by_split.items():
        if not items:
            continue
        seen = collections.Counter(item[6] for item in items)
        within[split] = sum(n - 1 for n in seen.values() if n > 1)
    across, listed = {}, []
    for first, second in PAIRS:
        if not by_split.get(first) or not by_split.get(second):
            continue
        exact_of = {item[6]: item for item in by_split[second]}
        exact, rest = [], []
        for item in by_split[first]:
            (exact if item[6] in exact_of else rest).append(item)
        near = list(_near_matches(rest, by_split[second], near_distance))
        across[f"{first}-{second}"] = {"exact": len(exact), "near": len(near)}
        listed += [{"kind": "exact", "images": [f"{first}:{a[1]}", f"{second}:{exact_of[a[6]][1]}"],
                    "distance": 0} for a in exact]
        listed += [{"kind": "near", "images": [f"{first}:{a[1]}", f"{second}:{b[1]}"],
                    "distance": d} for a, b, d in near]
    return {"near_distance": near_distance, "within": within, "across": across,
            "listed": listed[:LISTED], "more": max(0, len(listed) - LISTED)}


def statistics(noted: Sequence[Noted], near_distance: int) -> dict[str, Any]:
    """The manifest's `statistics` of the written images' facts."""
    if not noted:
        return {"split_counts": {}, "formats": {}, "sizes": {"longer_side": {}},
                "duplicates": duplicates([], near_distance)}
    formats = collections.Counter(item[5] for item in noted)
    buckets = collections.Counter(size_bucket(item[3], item[4]) for item in noted)
    return {
        "split_counts": {s: n for s in SPLITS
                         if (n := sum(item[0] == s for item in noted))},
        "formats": dict(sorted(formats.items())),
        "sizes": {"longer_side": {str(k): buckets[k] for k in sorted(buckets)},
                  "width": _spread([item[3] for item in noted]),
                  "height": _spread([item[4] for item in noted])},
        "duplicates": duplicates(noted, near_distance),
    }


def data_summary(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What a model keeps of its data for the next run's checks (`data_statistics.json`):
    the classes, their counts over every split and the statistics, without the named
    duplicates."""
    per_class = collections.Counter()
    for info in manifest.get("splits", {}).values():
        per_class.update(info.get("per_class", {}))
    kept = dict(manifest.get("statistics") or {})
    if "duplicates" in kept:
        kept["duplicates"] = {k: v for k, v in kept["duplicates"].items()
                              if k not in ("listed", "more")}
    return {"source": manifest.get("source"),
            "source_fingerprint": manifest.get("source_fingerprint"),
            "classes": list(manifest.get("classes", [])),
            "per_class": {name: per_class.get(name, 0) for name in manifest.get("classes", [])},
            "statistics": kept}
