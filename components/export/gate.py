"""The champion/challenger gate: a new model replaces the serving one only on evidence.

Both models are evaluated on the same held-out split with the same metric (test accuracy,
validation accuracy when the dataset has no test split), and each image's correctness is
kept for both: they are compared as paired predictions (`paired_test`: McNemar's exact
test on the images where they disagree, one-sided at `vertex.promotion_level`). Under
`vertex.promotion: default` a challenger is promoted when it is significantly better;
under `unless_shown_worse`, unless it is significantly worse than
`vertex.non_inferiority_margin` allows (a scheduled retraining keeps the model current on
fresh data unless the split shows the new one worse; a small split shows little, and
every decision says the smallest difference it can detect). The first model, with no
champion, is promoted on the absolute threshold alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from components.export.paired_test import (
    POWER,
    Paired,
    better,
    detectable,
    images_for,
    not_worse,
)

#: `vertex.promotion`: what a model that passes the gate (and one that does not) becomes.
PROMOTIONS = ("default", "unless_shown_worse", "version_only", "never")


@dataclasses.dataclass(frozen=True)
class Decision:
    """The gate's verdict.

    Attributes:
        register: Register the model (as a new model or a new version).
        default: Make it the default version (the one that serves).
        promoted: It beat the champion (or passed the threshold, with no champion).
        reason: One sentence saying why, for the report and the notification.
        metric: The metric compared.
        challenger: The new model's value of it.
        champion: The champion's value of it, None without a champion.
        serving_check: What the model server did with it before it could serve
            (`components.serving.serving_check.ServingCheck.to_dict`), None if not run.
        paired: The paired test against the champion (its counts, `p_value` and `rule`),
            None without a champion.
        champion_kept: Runs in a row this one included that kept the champion, and since
            when (`champion_streak.Streak.to_dict`), None when it did not keep one.
        warning: The line saying so, from `vertex.champion_kept_warning` runs on.
    """

    register: bool
    default: bool
    promoted: bool
    reason: str
    metric: str
    challenger: float
    champion: float | None
    serving_check: dict[str, Any] | None = None
    paired: dict[str, Any] | None = None
    champion_kept: dict[str, Any] | None = None
    warning: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def after_serving_check(self, check: Any) -> Decision:
        """The decision once the model ran in its serving container: unchanged when the
        check passed; otherwise not registered, and the champion keeps serving."""
        if check.ok:
            return dataclasses.replace(self, serving_check=check.to_dict())
        return dataclasses.replace(
            self, register=False, default=False, promoted=False,
            reason=f"{self.reason.rsplit(': promoted', 1)[0]}, but it failed in its serving "
                   f"container ({'; '.join(check.problems)}): not registered; "
                   + ("the champion keeps serving" if self.champion is not None
                      else "no model serves yet"),
            serving_check=check.to_dict())


def compared_metric(metrics: Mapping[str, Any]) -> str:
    """The metric the gate compares: test accuracy, else validation accuracy."""
    return "test_accuracy" if "test_accuracy" in metrics else "accuracy"


def other_questions(challenger: Sequence[str], champion: Sequence[str], *,
                    on_vertex: bool) -> str:
    """Why a challenger whose class names differ from the champion's is never compared
    with it ("" when they are the same): its accuracy on its own data says nothing about
    the questions the champion answers, and a version of a model is the same model."""
    if list(challenger) == list(champion):
        return ""
    setting = ("vertex.parent_model (empty: a new model in the Model Registry)" if on_vertex
               else "vertex.model_display_name (a new model in the local registry)")
    return (f"this model's {len(challenger)} classes ({', '.join(challenger)}) are not the "
            f"champion's {len(champion)} ({', '.join(champion)}): a model that answers other "
            f"questions never replaces it nor becomes a version of it; not registered. To "
            f"start a new model for these classes, set {setting}")


def split_words(paired: Paired, level: float, margin: float, test: dict[str, Any]) -> str:
    """What the held-out split can tell, in words, kept in `test` too: the smallest
    relative difference in errors the test finds with 80% power on these images
    (`paired_test.detectable`) and, when `margin` is smaller, that the split is too small
    to tell it, with about how many images would."""
    found = detectable(paired, level)
    test.update(detectable=found, power=POWER)
    said = (f"; on these {paired.images} images the test finds, with {POWER:.0%} power, a "
            f"challenger with {found:.0%} fewer errors than the champion" if found else
            f"; on these {paired.images} images no difference in errors can be found with "
            f"{POWER:.0%} power (they disagree on {paired.discordant})")
    if found is not None and margin >= found:
        return said
    needed = images_for(paired, margin, level) if margin else None
    test.update(too_small_for=margin, images_needed=needed)
    return said + (f"; too few to tell a {margin:.0%} difference" + (
        f": about {needed:,} test images would (dataset.test_fraction)" if needed else ""))


def decide(challenger: Mapping[str, Any], champion: Mapping[str, Any] | None, *,
           threshold: float, promotion: str, level: float = 0.05, margin: float = 0.1,
           paired: Paired | None = None, refused: str = "") -> Decision:
    """The gate's decision for a challenger's metrics against the champion's (or none).

    Args:
        challenger: The new model's metrics.
        champion: The champion's metrics on the same split, None when there is none.
        threshold: The least value of the metric any registered model has.
        promotion: `default` (a significantly better model becomes the default version, a
            worse one that passes the threshold a non-default version), `unless_shown_worse`
            (the same, a model not shown worse than `margin` allows counting as better),
            `version_only` (every model that passes the threshold a non-default version)
            or `never` (nothing is registered; the decision is still reported).
        level: The paired test's one-sided level (`vertex.promotion_level`).
        margin: `unless_shown_worse`'s relative margin: the challenger may make this share more
            errors than the champion (`vertex.non_inferiority_margin`).
        paired: Both models' correctness on the same held-out images; needed with a
            champion (without it the challenger is not promoted, and the reason says so).
        refused: Why the challenger cannot be compared with the champion at all
            (`other_questions`): nothing is registered.
    """
    metric = compared_metric(challenger)
    value = float(challenger[metric])
    if refused:
        return Decision(False, False, False, refused, metric, value, None)
    best = None if champion is None else float(champion[metric])
    test = None
    if value < threshold:
        promoted, why = False, (f"{metric} {value:.4f} is below the threshold {threshold:.4f}")
    elif best is None:
        promoted, why = True, (f"no champion yet; {metric} {value:.4f} passes the threshold "
                               f"{threshold:.4f}")
    elif paired is None:
        promoted, why = False, (f"{metric} {value:.4f} against the champion's {best:.4f}: "
                                "no paired predictions to compare them by")
    else:
        lenient = promotion == "unless_shown_worse"
        verdict = not_worse(paired, level, margin) if lenient else better(paired, level)
        test = {**dataclasses.asdict(paired), "p_value": round(verdict.p_value, 6),
                "rule": verdict.rule, "level": level, **({"margin": margin} if lenient else {})}
        test["decides"] = "promote unless shown worse than the margin" if lenient else \
            "promote only when shown better"
        promoted = verdict.passes
        if lenient:
            said = ("is not shown worse than" if promoted else
                    f"is worse, beyond the margin {margin:g}, than")
        else:
            said = "is significantly better than" if promoted else \
                "is not significantly better than"
        why = (f"{metric} {value:.4f} {said} the champion's {best:.4f} ({paired.words()}; "
               f"{verdict.rule}){split_words(paired, level, margin, test)}")
    passes = value >= threshold

    def made(register: bool, default: bool, is_promoted: bool, reason: str) -> Decision:
        return Decision(register, default, is_promoted, reason, metric, value, best,
                        paired=test)

    if promotion == "never":
        return made(False, False, promoted, f"{why}; vertex.promotion is never: not "
                    "registered")
    if promotion == "version_only":
        return made(passes, False, promoted, f"{why}; " + (
            "registered as a non-default version (vertex.promotion version_only)" if passes
            else "not registered"))
    if promoted:
        return made(True, True, True, f"{why}: promoted to the default version")
    if best is None:  # below the threshold, and nothing serves yet
        return made(False, False, False, f"{why}: not registered; no model serves yet")
    return made(passes, False, False, f"{why}: " + (
        "registered as a non-default version; the champion stays the default" if passes
        else "not registered; the champion stays the default"))
