"""What every model carries about its making: data, code, options, cluster and metrics.

Beside the local model as `lineage.json`; on Vertex AI as Model Registry labels (within
the API's label rules) and as the model's description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def lineage(*, manifest: Mapping[str, Any], training: Mapping[str, Any],
            cluster: Mapping[str, Any], images: Mapping[str, Any], version: str,
            metrics: Mapping[str, Any],
            tuning: Mapping[str, Any] | None = None,
            efficiency: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The lineage record of a model.

    `images` is the build stage's output: per image its reference by digest (what ran) and
    its content tag (what people search the registry and the build logs for). `tuning`, a
    study record (`components.tuning.trials`), adds the study that chose the options;
    `efficiency` (`components.training.efficiency.summary`) what the training cost and how
    busy it kept the machines.
    """
    trainer = images.get("gpu") or {}
    return {
        "project_version": version,
        "trainer_image": trainer.get("reference") or "local (this environment's trainer)",
        "image_tag": trainer.get("tag", ""),
        "images": {key: dict(value) for key, value in images.items()},
        "dataset": {
            "source": manifest.get("source"),
            "source_fingerprint": manifest.get("source_fingerprint"),
            "examples": manifest.get("examples"),
            "image_size": manifest.get("image_size"),
            "counts": {split: info.get("count")
                       for split, info in manifest.get("splits", {}).items()},
        },
        "training": dict(training),
        "cluster": dict(cluster),
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
        **({"tuning": {k: tuning[k] for k in ("metric", "goal", "best_trial",
                                               "best_parameters", "best_metric")}
            | {"trials": len(tuning["trials"])}
            | ({"cost_usd": tuning["cost"]["usd"]} if tuning.get("cost") else {})}
           if tuning else {}),
        **({"efficiency": dict(efficiency)} if efficiency else {}),
    }


def _label(value: Any) -> str:
    text = re.sub(r"[^a-z0-9_-]", "-", str(value).lower())
    return text[:63]


def labels(record: Mapping[str, Any], decision: Mapping[str, Any]) -> dict[str, str]:
    """Model Registry labels of a lineage record: lowercase keys and values of letters,
    digits, `_` and `-`, at most 63 characters (Vertex AI's label rules)."""
    plan = record["cluster"].get("training_plan") or {}
    fingerprint = str(record["dataset"].get("source_fingerprint") or "")
    digest = fingerprint.split(":", 1)[-1] if fingerprint.startswith("sha256:") else fingerprint
    image = str(record.get("trainer_image", ""))
    return {
        "gpu-pipeline-version": _label(record["project_version"]),
        "dataset-fingerprint": _label(digest)[:16] or "none",
        "trainer-image": _label(image.rsplit("@sha256:", 1)[-1][:16]) if "@sha256:" in image
        else "local",
        "image-tag": _label(record.get("image_tag") or "local"),
        "model": _label(record["training"].get("model", "")),
        "strategy": _label(record["cluster"].get("strategy", "")),
        **({"trained-on": _label(record["cluster"]["capacity"]["trained_on"].replace("]", ""))}
           if record["cluster"].get("capacity") else {}),
        **({"all-reduce": _label(plan.get("all_reduce", "")),
            "mixed-precision": _label(plan.get("mixed_precision", "")),
            "xla": "on" if plan.get("xla") else "off"} if plan else {}),
        "compared-metric": _label(decision.get("metric", "")),
        "challenger-value": _label(f"{decision.get('challenger', 0):.4f}".replace(".", "_")),
        "promoted": _label(decision.get("promoted", False)),
        **({"gate-discordant": _label(f"{paired['challenger_only']}-"
                                      f"{paired['champion_only']}"),
            "gate-p-value": _label(f"{paired['p_value']:.4f}".replace(".", "_"))}
           if (paired := decision.get("paired")) else {}),
        **({"champion-kept-runs": str(kept["runs"]),
            "champion-kept-since": _label(kept["since"])}
           if (kept := decision.get("champion_kept")) else {}),
    }


def description(record: Mapping[str, Any], decision: Mapping[str, Any]) -> str:
    """The model's description: the gate's reason and a summary of the lineage.

    Plain text without quotes or backslashes: google-cloud-pipeline-components builds the
    upload request's JSON by concatenation, without escaping.
    """
    data = record["dataset"]
    training = record["training"]
    text = (f"{decision.get('reason', '')} | gpu-pipeline {record['project_version']} | "
            f"dataset {data.get('source')} {data.get('source_fingerprint')} "
            f"({data.get('examples')} examples) | image {record['trainer_image']} "
            f"({record.get('image_tag') or 'local'}) | "
            f"{training.get('model')} {training.get('epochs')} epochs, "
            f"{record['cluster'].get('strategy')}")
    plan = record["cluster"].get("training_plan")
    if plan:
        text += (f" (all-reduce {plan.get('all_reduce')}, mixed precision "
                 f"{plan.get('mixed_precision')}, XLA {'on' if plan.get('xla') else 'off'})")
    capacity = record["cluster"].get("capacity")
    if capacity:
        from components.capacity.launcher import summary

        text += f" | {summary(capacity)}"
    study = record.get("tuning")
    if study:
        text += (f" | tuned: best of {study['trials']} trials by {study['metric']} "
                 f"{study['best_metric']:.4f}: " + ", ".join(
                     f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in study["best_parameters"].items()))
    return re.sub(r'["\\\x00-\x1f]', "", text)[:2000]
