"""The champion/challenger gate: a new model replaces the serving one only when it is better.

Both models are evaluated on the same held-out split with the same metric (test accuracy,
validation accuracy when the dataset has no test split). The first model, with no
champion, is promoted on the absolute threshold alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

#: `vertex.promotion`: what a model that passes the gate (and one that does not) becomes.
PROMOTIONS = ("default", "version_only", "never")


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
    """

    register: bool
    default: bool
    promoted: bool
    reason: str
    metric: str
    challenger: float
    champion: float | None
    serving_check: dict[str, Any] | None = None

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


def decide(challenger: Mapping[str, Any], champion: Mapping[str, Any] | None, *,
           threshold: float, margin: float, promotion: str,
           refused: str = "") -> Decision:
    """The gate's decision for a challenger's metrics against the champion's (or none).

    Args:
        challenger: The new model's metrics.
        champion: The champion's metrics on the same split, None when there is none.
        threshold: The least value of the metric any registered model has.
        margin: How much the challenger must beat the champion by.
        promotion: `default` (a better model becomes the default version, a worse one
            that passes the threshold a non-default version), `version_only` (every model
            that passes the threshold a non-default version) or `never` (nothing is
            registered; the decision is still reported).
        refused: Why the challenger cannot be compared with the champion at all
            (`other_questions`): nothing is registered.
    """
    metric = compared_metric(challenger)
    value = float(challenger[metric])
    if refused:
        return Decision(False, False, False, refused, metric, value, None)
    best = None if champion is None else float(champion[metric])
    if value < threshold:
        promoted, why = False, (f"{metric} {value:.4f} is below the threshold {threshold:.4f}")
    elif best is None:
        promoted, why = True, (f"no champion yet; {metric} {value:.4f} passes the threshold "
                               f"{threshold:.4f}")
    elif value - best >= margin - 1e-9:  # inclusive: 0.94 beats 0.93 by 0.01 exactly
        promoted, why = True, (f"{metric} {value:.4f} beats the champion's {best:.4f} by "
                               f"{value - best:+.4f} (margin {margin:.4f})")
    else:
        promoted, why = False, (f"{metric} {value:.4f} does not beat the champion's "
                                f"{best:.4f} by the margin {margin:.4f} ({value - best:+.4f})")
    passes = value >= threshold
    if promotion == "never":
        return Decision(False, False, promoted, f"{why}; vertex.promotion is never: not "
                        "registered", metric, value, best)
    if promotion == "version_only":
        return Decision(passes, False, promoted, f"{why}; "
                        + ("registered as a non-default version (vertex.promotion "
                           "version_only)" if passes else "not registered"), metric, value, best)
    if promoted:
        return Decision(True, True, True, f"{why}: promoted to the default version", metric,
                        value, best)
    if best is None:  # below the threshold, and nothing serves yet
        return Decision(False, False, False, f"{why}: not registered; no model serves yet",
                        metric, value, best)
    return Decision(passes, False, False, f"{why}: " + (
        "registered as a non-default version; the champion stays the default" if passes
        else "not registered; the champion stays the default"), metric, value, best)
