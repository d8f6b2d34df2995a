"""Stage 5: evaluate the new model and the champion, decide, export, and (locally) register.

Vertex AI registers through the pipeline's model upload (driven by the decision); a local
run registers into its local registry here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.cloud_names import vertex_endpoint
from components.export import model_metrics, publish_model, saved_model_dir
from components.registry import local
from components.registry.gate import Decision, decide
from components.registry.lineage import lineage
from trainer.contract import load_manifest
from trainer.gcs import to_mount_path
from trainer.remote import remote_call


def vertex_champion(parent_model: str, region: str) -> str:
    """The SavedModel directory (on the /gcs/ mount) of `parent_model`'s default version."""
    from google.cloud import aiplatform_v1

    with remote_call(f"reading the champion {parent_model}"):
        client = aiplatform_v1.ModelServiceClient(client_options={
            "api_endpoint": vertex_endpoint(region)})
        model = client.get_model(name=parent_model)  # no @version: the default version
    return saved_model_dir(to_mount_path(model.artifact_uri))


def comparison_markdown(decision: Decision, challenger: Mapping[str, Any],
                        champion: Mapping[str, Any] | None) -> str:
    """The report's comparison table and the decision."""
    keys = [k for k in ("test_accuracy", "accuracy", "test_examples", "examples")
            if k in challenger]
    rows = [f"| {k} | {challenger[k]:.4f} | "
            + (f"{champion[k]:.4f}" if champion and k in champion else "-") + " |" for k in keys]
    return "\n".join(["# Champion / challenger", "",
                      "| metric | challenger (this run) | champion |", "| --- | ---: | ---: |",
                      *rows, "", f"**Decision**: {decision.reason}.", ""])


def export_and_gate(trained_model: str | os.PathLike, dataset_dir: str | os.PathLike,
                    destination: str | os.PathLike, *, vertex: Any, training: Mapping[str, Any],
                    cluster: Mapping[str, Any], images: Mapping[str, Any], version: str,
                    registry_root: str = "") -> dict[str, Any]:
    """Both models' metrics on the same splits, the decision, and the new model exported.

    Args:
        trained_model: Where the trainer committed the model.
        dataset_dir: The prepared dataset.
        destination: The exported model location.
        vertex: The run's `VertexOptions` (threshold, margin, promotion, parent model).
        training: The training options (for the lineage).
        cluster: The cluster's strategy and pools (for the lineage).
        images: The build stage's images (references by digest and tags; empty locally).
        version: The project's version.
        registry_root: The local registry (`run --local`); "" on Vertex AI, where the
            champion is `vertex.parent_model`'s default version.

    Returns:
        `metrics`, `champion` (metrics or None), `decision`, `lineage`, `saved` (the
        committed SavedModel), `registered` (the local version, or None), `measured_here`
        (the models this stage had to evaluate: their metrics on this dataset were not
        beside them).
    """
    challenger, measured_by_trainer = model_metrics(trained_model, dataset_dir)
    model_dir = Path(registry_root) / vertex.model_display_name if registry_root else None
    if model_dir is not None:
        found = local.champion(model_dir)
        champion_dir = found[1] if found else None
    else:
        champion_dir = (vertex_champion(vertex.parent_model, vertex.region)
                        if vertex.parent_model else None)
    champion, champion_known = model_metrics(champion_dir, dataset_dir) if champion_dir \
        else (None, False)
    decision = decide(challenger, champion, threshold=vertex.accuracy_threshold,
                      margin=vertex.promotion_margin, promotion=vertex.promotion)
    record = lineage(manifest=load_manifest(dataset_dir), training=training, cluster=cluster,
                     images=images, version=version, metrics=challenger)
    saved = publish_model(trained_model, destination, challenger, dataset_dir, extra={
        "lineage.json": record, "decision.json": decision.to_dict(),
        "champion_evaluation.json": champion})
    measured_here = ([] if measured_by_trainer else ["challenger"]) + (
        ["champion"] if champion is not None and not champion_known else [])
    registered = None
    if model_dir is not None and decision.register:
        registered = local.register(model_dir, saved, challenger, record, decision.to_dict(),
                                    default=decision.default)["version"]
    return {"metrics": challenger, "champion": champion, "decision": decision,
            "lineage": record, "saved": saved, "registered": registered,
            "measured_here": measured_here}
