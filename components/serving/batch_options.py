"""The batch prediction step's settings (`vertex.batch_predict`), declared once (see
`trainer.common.schema`).

With `source` set, the model a run promotes (the gate's new default, or the canary the
deploy stage promoted) scores the source's images after the promotion: on Vertex AI as a
BatchPredictionJob (gcpc's ModelBatchPredictOp), in a local run with the serving
container's predictor (`components.serving.batch`).
"""

from __future__ import annotations

import pydantic
from pydantic import Field

from trainer.common.schema import STRICT, short


class BatchPredictOptions(pydantic.BaseModel):
    """What to score after a promotion, where the predictions go, and on what."""

    model_config = STRICT

    source: str = Field("", max_length=1024, description=(
        "The images to score after a promotion: a folder (gs://BUCKET/PREFIX/ on Vertex AI, "
        "a local folder in a local run), or a .txt manifest with one image per line; empty: "
        "no batch step."))
    destination: str = Field("", max_length=1024, description=(
        "Where the predictions are written (a gs:// prefix on Vertex AI, a local folder in a "
        "local run); empty: in the run's pipeline root, beside the instances."))
    machine_type: str = Field("n1-standard-4", description=(
        "The machine each batch prediction replica runs on (checked by stage 1's rules)."))
    starting_replica_count: int = Field(1, ge=1, description=(
        "Replicas the batch prediction job starts with."))
    max_replica_count: int = Field(1, ge=1, description=(
        "Most replicas the batch prediction job may scale to (what the quota must allow)."))
    batch_size: int = Field(16, ge=1, le=1000, description=(
        "Images per request to the model server (manual_batch_tuning_parameters)."))

    def problems(self) -> list[str]:
        """Rules a field's type cannot say; `on_vertex` checks the rest."""
        found = []
        if self.max_replica_count < self.starting_replica_count:
            found.append(f"max_replica_count is {self.max_replica_count}, below "
                         f"starting_replica_count {self.starting_replica_count}")
        if self.destination and not self.source:
            found.append(f"destination is {short(self.destination)} but source is empty; set "
                         "source to the images to score, or remove destination")
        return found

    def on_vertex(self, region: str) -> list[str]:
        """On Vertex AI: Cloud Storage paths, and the machine under stage 1's rules."""
        from components.gpu.validation import validate_worker_pool_specs

        if not self.source:
            return []
        found = [f"batch_predict.{name} is {short(value)}; on Vertex AI expected a gs:// "
                 "path (a folder, or a .txt manifest)" for name, value in
                 (("source", self.source), ("destination", self.destination))
                 if value and not value.startswith("gs://")]
        # One machine's rules (GPU counts per machine type, regions): stage 1's chief
        # pool holds exactly one replica, serving replicas are not a training cluster.
        pool = {"machine_spec": {"machine_type": self.machine_type},
                "replica_count": 1}
        return found + validate_worker_pool_specs(
            [pool], region, labels=["batch_predict (the prediction machine)"]).errors
