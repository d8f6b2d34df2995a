"""Which split each of a model's figures is from, said in one place: every line that prints
an accuracy names its split, and the run's headline is the figure the gate decided on
(`gate.compared_metric`).

The export stage's metrics: `accuracy`, `examples` and `accuracy_<class>` are the
validation split's (the per-class figures too); `test_accuracy` and `test_examples` the
test split's. The trainer's final metrics: `loss`, `accuracy`, `examples` the training
split's; `val_*` the validation split's; `evaluator_*` the sidecar evaluator's (on the
validation split).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The trainer's final metrics by prefix: (split, what it is called in words).
TRAINER_SPLITS = (("", "training split"), ("val_", "validation split"),
                  ("evaluator_", "sidecar evaluator (validation split)"))


def _count(value: Any) -> str:
    return f"{int(value):,}"


def model_figures(metrics: Mapping[str, Any]) -> str:
    """The exported model's accuracy on each split, named: the validation split's with
    its per-class figures, then the test split's."""
    per_class = ", ".join(f"{key.removeprefix('accuracy_')} {value:.4f}"
                          for key, value in metrics.items() if key.startswith("accuracy_"))
    words = (f"validation accuracy {metrics['accuracy']:.4f} on {_count(metrics['examples'])} "
             "images" + (f" (per class: {per_class})" if per_class else ""))
    if "test_accuracy" in metrics:
        words += (f"; test accuracy {metrics['test_accuracy']:.4f} on "
                  f"{_count(metrics['test_examples'])} images")
    return words


def headline(metrics: Mapping[str, Any]) -> str:
    """The figure the gate decided on, with its split: the test split's accuracy, else the
    validation split's (a dataset without a test split)."""
    from components.export.gate import compared_metric

    if compared_metric(metrics) == "test_accuracy":
        return (f"test accuracy {metrics['test_accuracy']:.4f} on "
                f"{_count(metrics['test_examples'])} images (the figure the gate used; "
                f"validation {metrics['accuracy']:.4f})")
    return (f"validation accuracy {metrics['accuracy']:.4f} on {_count(metrics['examples'])} "
            "images (the figure the gate used: the dataset has no test split)")


def trainer_figures(metrics: Mapping[str, Any]) -> str:
    """The trainer's final figures, split by split: loss and accuracy at four decimals,
    the count of images whole (`examples 1024`, never `1024.0000`)."""
    parts = []
    for prefix, split in TRAINER_SPLITS:
        mine = {key.removeprefix(prefix): value for key, value in metrics.items()
                if key.startswith(prefix) and not any(
                    key.startswith(other) for other, _ in TRAINER_SPLITS
                    if other and other != prefix)}
        figures = [f"{name} {value:.4f}" for name, value in mine.items()
                   if name not in ("examples", "epochs", "epochs_completed")]
        if not figures:
            continue
        on = f" on {_count(mine['examples'])} images" if "examples" in mine else ""
        parts.append(f"{split}: {', '.join(figures)}{on}")
    return "; ".join(parts)
