"""The data checks of a run, before it trains: this data's leakage (test or validation
images that are also training images), and its drift from the data the champion was
trained on (`data_statistics.data_summary`, kept beside the champion).

Drift is measured as Vertex AI Model Monitoring measures it (`DataDriftSpec`: the
L-infinity distance for categorical values, the Jensen-Shannon divergence for numeric
ones; https://cloud.google.com/python/docs/reference/aiplatform/latest/vertexai.resources.
preview.ml_monitoring.spec.DataDriftSpec): the classes' and formats' shares by the first,
the image sizes (the longer side's octave) by the second.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from trainer.common.errors import InputError


class DataDriftError(InputError):
    """`dataset.drift: fail` and the data drifted, or leaks test images into training."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing the checks found.

    Attributes:
        check: What was checked (`leakage`, `classes`, `class share`, `formats`, `sizes`).
        line: One line that says it, with the figures.
        warning: Whether it warns (and fails the run under `dataset.drift: fail`); a
            finding that only informs does neither.
    """

    check: str
    line: str
    warning: bool = True


def _shares(counts: Mapping[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def l_infinity(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[float, str]:
    """The largest difference of two distributions' shares, and the value it is at."""
    keys = sorted(set(a) | set(b))
    return max(((abs(a.get(k, 0.0) - b.get(k, 0.0)), k) for k in keys), default=(0.0, ""))


def jensen_shannon(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """The Jensen-Shannon divergence of two distributions, in bits (0 to 1)."""
    def kl(p: Mapping[str, float], m: Mapping[str, float]) -> float:
        return sum(v * math.log2(v / m[k]) for k, v in p.items() if v > 0)

    keys = set(a) | set(b)
    middle = {k: (a.get(k, 0.0) + b.get(k, 0.0)) / 2 for k in keys}
    return max(0.0, (kl(a, middle) + kl(b, middle)) / 2)


def _median(statistics: Mapping[str, Any]) -> str:
    sizes = statistics["sizes"]
    return f"{sizes['width']['median']:g}x{sizes['height']['median']:g}"


def leakage(statistics: Mapping[str, Any], champion: Mapping[str, Any] | None) -> list[Finding]:
    """Test and validation images that are also training images, a defect of this data
    whatever the champion's: byte for byte, under another label (the finding is the
    label), or as near copies (with the champion's share beside it, measured alike). Each
    warns on every run."""
    found = []
    duplicates = statistics.get("duplicates") or {}
    difference = duplicates.get("near_difference")
    before = ((champion or {}).get("statistics", {}).get("duplicates") or {})
    # A champion's counts by another measure (the bit distance of a hash) compare with none.
    comparable = before.get("near_difference") == difference
    for pair, counts in duplicates.get("across", {}).items():
        first, second = pair.split("-")
        if second != "train":
            continue
        if counts["exact"]:
            found.append(Finding("leakage", (
                f"{counts['exact']} {first} image(s) are byte-identical to training images: "
                f"the {first} accuracy counts images the model trained on (the dataset "
                "report names them)")))
        if counts.get("other_label"):
            found.append(Finding("leakage", (
                f"{counts['other_label']} {first} image(s) are copies of training images "
                "labelled as another class: one of the two labels is wrong, or one picture "
                "is in two classes (the dataset report names them)")))
        if counts["near"]:
            total = statistics.get("split_counts", {}).get(first) or 0
            now = counts["near"] / total if total else 0.0
            then_counts = before.get("across", {}).get(pair) if comparable else None
            then_total = (champion or {}).get("statistics", {}).get(
                "split_counts", {}).get(first) or 0
            then = then_counts["near"] / then_total if then_counts and then_total else None
            found.append(Finding("leakage", (
                f"{counts['near']} {first} image(s) ({now:.1%}) are near copies of training "
                f"images (8x8 thumbnails within {difference:g} of 255)"
                + (f" ({then:.1%} in the champion's data)" if then is not None else "")
                + f": resized or re-encoded copies, which the {first} accuracy counts as "
                  "unseen (the dataset report names them)")))
    return found


def distances(summary: Mapping[str, Any], champion: Mapping[str, Any]
              ) -> dict[str, tuple[float, str]]:
    """The drift measured, each with the value it is largest at: `class share` (among the
    classes both have) and `formats` (L-infinity), `sizes` (Jensen-Shannon); a measure
    either data lacks is left out."""
    now, then = summary["per_class"], champion.get("per_class", {})
    common = [c for c in now if c in then]
    measured = {}
    if common:
        measured["class share"] = l_infinity(_shares({c: now[c] for c in common}),
                                             _shares({c: then[c] for c in common}))
    stats_now, stats_then = summary.get("statistics", {}), champion.get("statistics", {})
    if stats_now.get("formats") and stats_then.get("formats"):
        measured["formats"] = l_infinity(_shares(stats_now["formats"]),
                                         _shares(stats_then["formats"]))
    sides_now = (stats_now.get("sizes") or {}).get("longer_side")
    sides_then = (stats_then.get("sizes") or {}).get("longer_side")
    if sides_now and sides_then:
        measured["sizes"] = (jensen_shannon(_shares(sides_now), _shares(sides_then)), "")
    return measured


def drift(summary: Mapping[str, Any], champion: Mapping[str, Any], *, share: float,
          sizes: float) -> list[Finding]:
    """This data (`data_summary`) against the champion's: classes gone or new, a class's
    or a format's share moved more than `share`, the sizes' divergence above `sizes`."""
    found = []
    now, then = summary["per_class"], champion.get("per_class", {})
    for name in [c for c in then if c not in now]:
        found.append(Finding("classes", (
            f"class {name!r} is gone: the champion's data had {then[name]} image(s) of it "
            f"({_shares(then)[name]:.1%}); the new model cannot answer it")))
    for name in [c for c in now if c not in then]:
        found.append(Finding("classes", (
            f"class {name!r} is new: {now[name]} image(s) ({_shares(now)[name]:.1%}); the "
            "champion never saw it")))
    measured = distances(summary, champion)
    stats_now, stats_then = summary.get("statistics", {}), champion.get("statistics", {})
    moved, at = measured.get("class share", (0.0, ""))
    if moved > share:
        # The shares compared: among the classes both data have.
        common = [c for c in now if c in then]
        among = "" if len(common) == len(now) == len(then) else \
            f" among the {len(common)} classes both have"
        found.append(Finding("class share", (
            f"class {at!r} is {_shares({c: now[c] for c in common})[at]:.1%} of the images"
            f"{among}, {_shares({c: then[c] for c in common})[at]:.1%} in the champion's "
            f"data: its share moved {moved:.1%}, more than dataset.drift_share {share:.1%}")))
    moved, at = measured.get("formats", (0.0, ""))
    if moved > share:
        formats_now, formats_then = stats_now["formats"], stats_then["formats"]
        found.append(Finding("formats", (
            f"{at} images are {_shares(formats_now).get(at, 0.0):.1%} of the images, "
            f"{_shares(formats_then).get(at, 0.0):.1%} in the champion's data: the "
            f"share moved {moved:.1%}, more than dataset.drift_share {share:.1%}")))
    divergence = measured.get("sizes", (0.0, ""))[0]
    if divergence > sizes:
        found.append(Finding("sizes", (
            f"image sizes shifted: median {_median(stats_now)}, {_median(stats_then)} in "
            f"the champion's data (Jensen-Shannon divergence {divergence:.3f} of the "
            f"longer sides' octaves, more than dataset.drift_sizes {sizes:g})")))
    return found
