"""What the measurements say for one GPU: each of the plan's choices (XLA, precision,
NVIDIA's environment, NHWC, prefetching) decided by comparisons of measured cases.

A comparison counts only between two cases of **one results file** (one machine, one day)
that differ in the setting compared and agree on every other (`measurements.SETTINGS`),
both through synthetic batches. For each comparison the files are tried in the order
`Measurements.for_gpu` gives (the GPU's own first; another GPU of its architecture stands
in, and its reason says "extrapolated from"); the first file holding such a pair decides,
and within it the setting must have been faster in every pair. What no file compares is
"not measured": the plan's rules decide it (`trainer.cluster.training_plan`). Pure Python.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from trainer.cluster.measurements import Case, ResultsFile, stands_in

#: How each setting's values read in a reason.
WORDS: dict[str, Callable[[Any], str]] = {
    "precision": lambda v: {"off": "float32", "float16": "float16",
                            "bfloat16": "bfloat16"}[v],
    "xla": lambda v: "XLA on" if v else "XLA off",
    "nvidia_environment": lambda v: ("with" if v else "without") + " NVIDIA's environment",
    "keep_nhwc": lambda v: "NHWC kept" if v else "Grappler's layout",
    "prefetch": lambda v: "prefetched to the GPU" if v else "not prefetched",
}
_SHARED = {"nvidia_environment": (True, "with NVIDIA's environment"),
           "keep_nhwc": (True, "NHWC kept"), "prefetch": (True, "prefetched to the GPU"),
           "xla": (True, "XLA on")}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two values of one setting compared in one file.

    Attributes:
        setting: The setting (`measurements.SETTINGS`).
        pairs: (case with `first`, case with `second`), each agreeing on the rest.
        results: The file they come from.
        accelerator: The GPU the plan is for.
    """

    setting: str
    first: Any
    second: Any
    pairs: tuple[tuple[Case, Case], ...]
    results: ResultsFile
    accelerator: str

    @property
    def winner(self) -> Any:
        """The value faster in every pair; None when the pairs disagree."""
        if all(a.images_per_second > b.images_per_second for a, b in self.pairs):
            return self.first
        if all(b.images_per_second > a.images_per_second for a, b in self.pairs):
            return self.second
        return None

    def said(self) -> str:
        """The figures (the winner's first; a switch's with it first), and their file."""
        winner, figures = self.winner, []
        for a, b in self.pairs:
            if winner == self.second:
                a, b = b, a
            if isinstance(self.first, bool):
                on, off = (a, b) if getattr(a, self.setting) else (b, a)
                figure = (f"{on.images_per_second:,.0f} images/s with it against "
                          f"{off.images_per_second:,.0f} without")
            else:
                word = WORDS[self.setting]
                figure = (f"{word(getattr(a, self.setting))} {a.images_per_second:,.0f} "
                          f"images/s against {word(getattr(b, self.setting))} "
                          f"{b.images_per_second:,.0f}")
            figures.append(figure + _shared(a, self.setting))
        verdict = "" if winner is not None else "measured both ways: "
        return verdict + "; ".join(figures) + " " + cited(self.results, self.accelerator)


def _shared(case: Case, setting: str) -> str:
    """What a pair's two cases share that is not the default, e.g. ", both at batch 512"."""
    parts = [said for name, (value, said) in _SHARED.items()
             if name != setting and getattr(case, name) == value]
    if setting != "precision":
        parts.insert(0, f"in {WORDS['precision'](case.precision)}")
    if case.batch != 256:
        parts.append(f"at batch {case.batch}")
    if case.steps_per_execution != 1:
        parts.append(f"{case.steps_per_execution} steps per execution")
    return f", {', '.join(parts)}" if parts else ""


def cited(results: ResultsFile, accelerator: str) -> str:
    """Where figures come from: the GPU and file, and whether they stand in for another."""
    where = f"an {results.gpu}" if results.gpu else results.accelerator
    if results.on_cpu:
        return f"(measured on CPUs, not on a GPU: {results.source})"
    if stands_in(results, accelerator):
        return f"(extrapolated from {where}, {results.source})"
    return f"(on {where}, {results.source})"


def compare(files: Sequence[ResultsFile], accelerator: str, setting: str, first: Any,
            second: Any, where: Callable[[Case], bool] = lambda c: True,
            prefer: Callable[[Case], int] | None = None) -> Comparison | None:
    """`first` against `second` of `setting`, from the first file holding a pair of cases
    (completed, synthetic, accepted by `where`) that differ only in it; within that file
    the pairs `prefer` scores highest (how close they run to the plan). None when no file
    compares them."""
    for results in files:
        done = [c for c in results.cases if c.images_per_second and c.input == "synthetic"
                and where(c)]
        pairs = [(a, b) for a in done if getattr(a, setting) == first
                 for b in done if getattr(b, setting) == second
                 and a.settings(setting) == b.settings(setting)]
        if pairs:
            if prefer is not None:
                top = max(prefer(a) for a, _ in pairs)
                pairs = [(a, b) for a, b in pairs if prefer(a) == top]
            return Comparison(setting, first, second, tuple(pairs), results, accelerator)
    return None


@dataclasses.dataclass(frozen=True)
class Finding:
    """A choice the measurements make, why, and the files behind it."""

    value: Any
    reason: str
    sources: tuple[str, ...]


def best_of(files: Sequence[ResultsFile], accelerator: str, setting: str,
            candidates: Sequence[Any], where: Callable[[Case], bool] = lambda c: True,
            prefer: Callable[[Case], int] | None = None) -> Finding | None:
    """The candidate that measured faster than every other it was compared with (each
    pair of candidates compared in one file); None when none did (nothing compared, the
    pairs disagree, or no candidate won every comparison it was in)."""
    found = [c for a, b in itertools.combinations(candidates, 2)
             if (c := compare(files, accelerator, setting, a, b, where, prefer))]
    winners = [v for v in candidates
               if any(c.winner == v for c in found)
               and all(c.winner == v for c in found if v in (c.first, c.second))]
    if len(winners) != 1:
        return None
    won = [c for c in found if c.winner == winners[0]]
    unmeasured = [WORDS[setting](v) for v in candidates
                  if v != winners[0] and not any(v in (c.first, c.second) for c in found)]
    reason = (f"{WORDS[setting](winners[0])} measured fastest: "
              + "; ".join(c.said() for c in won)
              + (f"; {', '.join(unmeasured)} not measured" if unmeasured else ""))
    return Finding(winners[0], reason, tuple(dict.fromkeys(c.results.source for c in won)))


def against(files: Sequence[ResultsFile], accelerator: str, setting: str, asked: Any,
            best: Finding | None, where: Callable[[Case], bool] = lambda c: True) -> str:
    """For a value asked for: "" when nothing measured faster, else what did, with the
    figures (the direct comparison when one file holds it)."""
    if best is None or best.value == asked:
        return ""
    direct = compare(files, accelerator, setting, best.value, asked, where)
    if direct is not None and direct.winner == best.value:
        return f"; {WORDS[setting](best.value)} measured faster: {direct.said()}"
    return f"; {best.reason}"


def xla_failures(files: Sequence[ResultsFile], accelerator: str) -> Finding | None:
    """XLA off where it was tried and never completed a step: the first file (in the
    order given) with XLA cases, none of them completed."""
    for results in files:
        tried = [c for c in results.cases if c.xla]
        if not tried:
            continue
        if any(c.images_per_second for c in tried):
            return None
        stopped = "; ".join(dict.fromkeys(f"{c.name}: {c.error}" for c in tried))
        return Finding(False, f"no XLA step completed: {stopped} "
                       f"{cited(results, accelerator)}", (results.source,))
    return None
