"""`models list --config`: the Vertex AI Model Registry versions the pipeline registered."""

from __future__ import annotations

from typing import Any

from pipelines.config import Config
from pipelines.vertex.clients import Clients
from pipelines.vertex.preflight import VertexSettingsError


def list_request(config: Config) -> Any:
    """The request listing the models the pipeline registers into
    (`components.capacity.measured_speed.list_request`).

    Raises:
        VertexSettingsError: Neither `vertex.parent_model` nor `vertex.project` is set.
    """
    from components.capacity.measured_speed import RegistryNotNamedError
    from components.capacity.measured_speed import list_request as request_for

    try:
        return request_for(config.vertex, config.vertex.project)
    except RegistryNotNamedError as exc:
        raise VertexSettingsError(str(exc)) from None


def list_models(config: Config, clients: Clients | None = None) -> list[Any]:
    """The registered models (or versions), newest first."""
    from components.capacity.measured_speed import RegistryNotNamedError
    from components.capacity.measured_speed import list_models as listed

    try:
        return listed(config.vertex, config.vertex.project,
                      clients.model_api if clients is not None else None)
    except RegistryNotNamedError as exc:
        raise VertexSettingsError(str(exc)) from None


def describe(model: Any) -> str:
    """One line per version: name@version, aliases, created, the gate's labels."""
    labels = dict(model.labels)
    metric = labels.get("compared-metric", "")
    value = labels.get("challenger-value", "").replace("_", ".")
    created = model.version_create_time.isoformat() if model.version_create_time else "-"
    return (f"{model.name}@{model.version_id}  aliases {','.join(model.version_aliases) or '-'}"
            f"  created {created}  {metric} {value or '-'}  promoted "
            f"{labels.get('promoted', '-')}  dataset {labels.get('dataset-fingerprint', '-')}"
            + (f"  champion kept {labels['champion-kept-runs']} run(s) in a row since "
               f"{labels.get('champion-kept-since', '-')}" if "champion-kept-runs" in labels
               else ""))
