"""`models list --config`: the Vertex AI Model Registry versions the pipeline registered."""

from __future__ import annotations

from typing import Any

from components.cloud_names import vertex_endpoint
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from pipelines.vertex.preflight import VertexSettingsError
from trainer.common.cloud_calls import remote_call


def list_request(config: Config) -> Any:
    """The request listing the models the pipeline registers into.

    With `vertex.parent_model`, its versions (ListModelVersionsRequest); otherwise the
    models named `vertex.model_display_name` (ListModelsRequest), each a first version.
    """
    from google.cloud import aiplatform_v1

    v = config.vertex
    if v.parent_model:
        return aiplatform_v1.ListModelVersionsRequest(name=v.parent_model,
                                                      order_by="create_time desc")
    if not v.project:
        raise VertexSettingsError("vertex.project must be set to list the Model Registry (in "
                                  "the config file or with --project)")
    return aiplatform_v1.ListModelsRequest(
        parent=f"projects/{v.project}/locations/{v.region}",
        filter=f'display_name="{v.model_display_name}"', order_by="create_time desc")


def list_models(config: Config, clients: Clients | None = None) -> list[Any]:
    """The registered models (or versions), newest first."""
    request = list_request(config)
    client = clients.model_api if clients is not None and clients.model_api else None
    with remote_call("listing the Model Registry"):
        if client is None:
            from google.cloud import aiplatform_v1

            client = aiplatform_v1.ModelServiceClient(client_options={
                "api_endpoint": vertex_endpoint(config.vertex.region)})
        method = (client.list_model_versions
                  if type(request).__name__.startswith("ListModelVer") else client.list_models)
        return list(method(request=request))


def describe(model: Any) -> str:
    """One line per version: name@version, aliases, created, the gate's labels."""
    labels = dict(model.labels)
    metric = labels.get("compared-metric", "")
    value = labels.get("challenger-value", "").replace("_", ".")
    created = model.version_create_time.isoformat() if model.version_create_time else "-"
    return (f"{model.name}@{model.version_id}  aliases {','.join(model.version_aliases) or '-'}"
            f"  created {created}  {metric} {value or '-'}  promoted "
            f"{labels.get('promoted', '-')}  dataset {labels.get('dataset-fingerprint', '-')}")
