"""The prepared data's statistics beside its per-class counts: image formats and sizes as
the source stores them, and duplicates within and across splits (exact: the same bytes;
near: thumbnails that differ little, `image_facts`).

They go into the manifest (`statistics`), the dataset's report and, with the model, into
`data_statistics.json`, which the next run's data checks (`drift`) compare with.
"""

from __future__ import annotations

import collections
import math
import statistics as stats
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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


def _near_matches(queries: list[Noted], others: list[Noted], limit: float
                  ) -> Iterable[tuple[Noted, Noted, float]]:
    """Each query's closest image of `others` whose thumbnail differs by at most `limit`
    (`image_facts.difference`), if any.

    Two thumbnails' means differ by no more than their mean absolute difference, so each
    query is compared only with the images whose thumbnail mean is within `limit` of its
    own (sorted once, found by bisection): exact, and a small share of all pairs.
    """
    import numpy as np

    if not queries or not others:
        return
    pixels = np.frombuffer(bytes.fromhex("".join(item[7] for item in others)), np.uint8
                           ).reshape(len(others), -1).astype(np.int16)
    means = pixels.mean(axis=1)
    order = np.argsort(means, kind="stable")
    pixels, means = pixels[order], means[order]
    for query in queries:
        mine = np.frombuffer(bytes.fromhex(query[7]), np.uint8).astype(np.int16)
        low, high = np.searchsorted(means, [mine.mean() - limit, mine.mean() + limit + 1e-9])
        if low == high:
            continue
        differences = np.abs(pixels[low:high] - mine).mean(axis=1)
        best = int(np.argmin(differences))
        if differences[best] <= limit:
            yield query, others[int(order[low + best])], round(float(differences[best]), 2)


def _pair(kind: str, first: str, a: Noted, second: str, b: Noted,
          difference: float) -> dict[str, Any]:
    found = {"kind": kind, "images": [f"{first}:{a[1]}", f"{second}:{b[1]}"],
             "difference": difference}
    if a[2] != b[2]:  # the same picture under two labels: the finding is the label
        found["labels"] = [a[2], b[2]]
    return found


def duplicates(noted: Sequence[Noted], near_difference: float) -> dict[str, Any]:
    """Duplicates within each split (the same bytes) and across splits (`PAIRS`: the same
    bytes, or thumbnails within `near_difference`), counted and the first `LISTED` named;
    `other_label` counts the pairs whose two images are labelled differently.
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
        pairs = [_pair("exact", first, a, second, exact_of[a[6]], 0.0) for a in exact]
        near = [_pair("near", first, a, second, b, d)
                for a, b, d in _near_matches(rest, by_split[second], near_difference)]
        across[f"{first}-{second}"] = {
            "exact": len(exact), "near": len(near),
            "other_label": sum("labels" in p for p in pairs + near)}
        listed += pairs + near
    # The pairs under two labels first: each is a finding of its own.
    listed.sort(key=lambda p: "labels" not in p)
    return {"near_difference": near_difference, "within": within, "across": across,
            "listed": listed[:LISTED], "more": max(0, len(listed) - LISTED)}


def statistics(noted: Sequence[Noted], near_difference: float) -> dict[str, Any]:
    """The manifest's `statistics` of the written images' facts."""
    if not noted:
        return {"split_counts": {}, "formats": {}, "sizes": {"longer_side": {}},
                "duplicates": duplicates([], near_difference)}
    formats = collections.Counter(item[5] for item in noted)
    buckets = collections.Counter(size_bucket(item[3], item[4]) for item in noted)
    return {
        "split_counts": {s: n for s in SPLITS
                         if (n := sum(item[0] == s for item in noted))},
        "formats": dict(sorted(formats.items())),
        "sizes": {"longer_side": {str(k): buckets[k] for k in sorted(buckets)},
                  "width": _spread([item[3] for item in noted]),
                  "height": _spread([item[4] for item in noted])},
        "duplicates": duplicates(noted, near_difference),
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
