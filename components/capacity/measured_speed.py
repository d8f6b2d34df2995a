"""The newest measured training run: the newest model in the Vertex AI Model Registry that
carries the figures its run measured (`efficiency.json`, written beside the model by the
export stage) with its lineage (`lineage.json` beside it: the cluster that trained it and
the dataset's size). `submit --dry-run` estimates a run's cost from it
(`pipelines.vertex.cost_estimate`), and so does every run's training step before it
creates a job (`components.capacity.budget.hold`), so that a scheduled run is held to
`vertex.budget_usd` at the speed its predecessors showed on the cluster they trained on
(`components.capacity.training_hours`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer.common.errors import InputError

if TYPE_CHECKING:
    from components.vertex_options import VertexOptions


class RegistryNotNamedError(InputError):
    """The options do not say which registry to read."""


def seconds_per_epoch(figures: dict[str, Any]) -> float | None:
    """A run's training seconds per epoch from its efficiency figures."""
    epochs = max((len(r.get("epochs", [])) for r in figures.get("replicas", {}).values()),
                 default=0)
    seconds = figures.get("cluster", {}).get("train_seconds") or 0
    return seconds / epochs if epochs and seconds else None


@dataclasses.dataclass(frozen=True)
class Registered:
    """A registered model's measured run.

    Attributes:
        version: The model version (`projects/.../models/ID@VERSION`).
        figures: Its `efficiency.json`.
        lineage: Its `lineage.json` (`components.export.lineage`); {} when it has none.
    """

    version: str
    figures: dict[str, Any]
    lineage: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def seconds_per_epoch(self) -> float | None:
        """Its training seconds per epoch, warm-up and validation included."""
        return seconds_per_epoch(self.figures)

    @property
    def images_per_epoch(self) -> int:
        """The training and validation images of an epoch of its dataset (0: unknown)."""
        counts = (self.lineage.get("dataset") or {}).get("counts") or {}
        return sum(int(counts.get(split) or 0) for split in ("train", "validation"))

    @property
    def worker_pool_specs(self) -> list[Any]:
        """The pools that trained it ([] when its lineage does not say)."""
        return list((self.lineage.get("cluster") or {}).get("worker_pool_specs") or [])


def list_request(vertex: VertexOptions, project: str) -> Any:
    """The request listing the models the pipeline registers into, in `project`.

    With `vertex.parent_model`, its versions (ListModelVersionsRequest); otherwise the
    models named `vertex.model_display_name` (ListModelsRequest), each a first version.

    Raises:
        RegistryNotNamedError: Neither `vertex.parent_model` nor the project is set.
    """
    from google.cloud import aiplatform_v1

    if vertex.parent_model:
        return aiplatform_v1.ListModelVersionsRequest(name=vertex.parent_model,
                                                      order_by="create_time desc")
    if not project:
        raise RegistryNotNamedError(
            "vertex.project must be set to list the Model Registry (in the config file or "
            "with --project)")
    return aiplatform_v1.ListModelsRequest(
        parent=f"projects/{project}/locations/{vertex.region}",
        filter=f'display_name="{vertex.model_display_name}"', order_by="create_time desc")


def list_models(vertex: VertexOptions, project: str, client: Any = None,
                progress: Callable[[], None] = lambda: None) -> list[Any]:
    """The registered models (or versions), newest first (`client`: a ModelServiceClient;
    the region's, with the default credentials, when None); `progress()` after each page,
    each page's request timing out after `STALL_SECONDS`."""
    from components.cloud_names import vertex_endpoint
    from trainer.common.cloud_calls import STALL_SECONDS, remote_call

    request = list_request(vertex, project)
    with remote_call("listing the Model Registry"):
        if client is None:
            from google.cloud import aiplatform_v1

            from trainer.common.cloud_calls import default_credentials

            client = aiplatform_v1.ModelServiceClient(
                credentials=default_credentials()[0],
                client_options={"api_endpoint": vertex_endpoint(vertex.region)})
        method = (client.list_model_versions
                  if type(request).__name__.startswith("ListModelVer") else client.list_models)
        found = []
        for page in method(request=request, timeout=STALL_SECONDS).pages:
            progress()
            found.extend(page.models)
        return found


def newest_measured(vertex: VertexOptions, project: str, model_client: Any = None,
                    storage: Any = None,
                    progress: Callable[[], None] = lambda: None) -> Registered | None:
    """The newest registered model that has efficiency figures, with its lineage; None
    when none has (`storage`: a Cloud Storage client; the default one when None;
    `progress()` after each answer, for `bounded_read`).

    Raises:
        CloudCallError, CredentialsError: The registry or the bucket could not be read.
    """
    from components.export.model_files import LINEAGE as LINEAGE_FILE
    from components.training.efficiency import FILE
    from trainer.common.cloud_calls import remote_call

    models = list_models(vertex, project, model_client, progress)
    if storage is None and models:
        from trainer.common.gcs import storage_client

        with remote_call("connecting to Cloud Storage"):
            storage = storage_client()
    for model in models:
        uri = model.artifact_uri.rstrip("/")
        if not uri.startswith("gs://"):
            continue
        bucket, _, path = uri[len("gs://"):].partition("/")
        blob = storage.bucket(bucket).blob(f"{path}/{FILE}")
        with remote_call(f"reading {uri}/{FILE}"):
            if not blob.exists():
                progress()
                continue
            figures = json.loads(blob.download_as_text())
        progress()
        lineage = storage.bucket(bucket).blob(f"{path}/{LINEAGE_FILE}")
        with remote_call(f"reading {uri}/{LINEAGE_FILE}"):
            found = json.loads(lineage.download_as_text()) if lineage.exists() else {}
        return Registered(f"{model.name}@{model.version_id}", figures, found)
    return None
