"""What the measurements say for one GPU, the one place that says which measurement counts
for a decision of the plan (XLA, precision, NVIDIA's environment, NHWC, prefetching).

- Files measured on CPUs decide nothing for a GPU (`Measurements.for_gpu` leaves them out).
- The plan takes, as a whole, the fastest case the GPU's own newest file measured among
  those it can run (`fastest`): its precision, XLA, environment and layout together, so a
  combination no file ran never wins over one that was measured. A setting that file
  varied is decided so; one-setting comparisons within it explain the choice.
- A setting that file did not vary is decided by comparisons (`compare`, `best_of`): two
  cases of **one results file** (one machine, one day) that differ in it and agree on
  every other setting the benchmark records (`measurements.SETTINGS`), both through
  synthetic batches, faster in every pair. The GPU's own files decide a setting they
  measured at all; another GPU of its architecture stands in only for a setting its own
  files never measured, and its reason says "extrapolated from" (`deciding`).
- What no file compares is "not measured": the plan's rules decide it
  (`trainer.cluster.gpu_choices`). Pure Python.
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


def own(files: Sequence[ResultsFile], accelerator: str) -> list[ResultsFile]:
    """The files measured on the GPU itself (or its chip), in the order given."""
    return [f for f in files if not stands_in(f, accelerator)]


def varied(results: ResultsFile, setting: str) -> bool:
    """Whether a file ran the setting more than one way (a case that stopped counts: XLA
    tried and never completing is a measurement of XLA)."""
    return len({getattr(c, setting) for c in results.cases if c.input == "synthetic"}) > 1


def deciding(files: Sequence[ResultsFile], accelerator: str, setting: str
             ) -> list[ResultsFile]:
    """The files that decide a setting: the GPU's own when any of them measured it, else
    all (the stand-ins after them)."""
    mine = [f for f in own(files, accelerator) if varied(f, setting)]
    return own(files, accelerator) if mine else list(files)


@dataclasses.dataclass(frozen=True)
class Whole:
    """The fastest case measured on the GPU itself that the plan can run, and its file."""

    case: Case
    results: ResultsFile

    def decides(self, setting: str) -> bool:
        """Whether its file measured the setting (ran it more than one way)."""
        return varied(self.results, setting)

    def reason(self, setting: str, accelerator: str) -> str:
        """Why the setting takes the case's value: the case's figure, then the one-setting
        comparisons of its file that agree with it on the rest."""
        value = getattr(self.case, setting)
        word = WORDS[setting](value)
        head = (f"{word}, in the fastest case measured on the GPU ({self.case.name}, "
                f"{self.case.images_per_second:,.0f} images/s)")
        others = sorted({getattr(c, setting) for c in self.results.cases} - {value}, key=str)
        pairs = [c for other in others
                 if (c := compare([self.results], accelerator, setting, value, other,
                                  lambda x: x.settings(setting) == self.case.settings(
                                      setting)))]
        if pairs:
            return head + ": " + "; ".join(c.said() for c in pairs)
        # Its file never ran the case's neighbour: its pairs at other settings, as context.
        elsewhere = [c for other in others
                     if (c := compare([self.results], accelerator, setting, value, other))]
        return head + (" (its file has no case differing from it in this alone); elsewhere "
                       "in that file: " + "; ".join(c.said() for c in elsewhere) if elsewhere
                       else " " + cited(self.results, accelerator))


def fastest(files: Sequence[ResultsFile], accelerator: str, fits: Callable[[Case], bool]
            ) -> Whole | None:
    """The fastest completed synthetic case the plan can run (`Case.plan_can_run`, and
    `fits`: what the options and the GPU allow) in the first of the GPU's own files that
    has one; None when none has (then each setting is decided on its own)."""
    for results in own(files, accelerator):
        done = [c for c in results.cases if c.images_per_second and c.input == "synthetic"
                and c.plan_can_run and fits(c)]
        if done:
            return Whole(max(done, key=lambda c: c.images_per_second), results)
    return None
