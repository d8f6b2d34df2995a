"""The rollout on a Vertex AI endpoint (`rollout.Target`), by deployed-model ID only.

Vertex AI's rules this follows (REST reference, projects.locations.endpoints):
- DeployModel's `traffic_split` names the model being deployed `"0"` (Vertex AI fills in
  the ID it assigns) and its values must add up to 100; an empty split leaves the
  endpoint's split as it was. The DeployedModel's ID comes back in the operation's
  DeployModelResponse.
- UndeployModel undeploys a DeployedModel only when it has no traffic, or when the
  request's `traffic_split` takes its traffic away.
- Champion and challenger are versions of one model: on the endpoint they differ only by
  version, so every change here names a DeployedModel's ID, never a model.

The figures are the endpoint's metrics per deployed model in Cloud Monitoring (monitored
resource `aiplatform.googleapis.com/Endpoint`, metric label `deployed_model_id`; Vertex AI
docs: "Monitor models"): `prediction/online/response_count` and `error_count` summed over
the window, `prediction/online/prediction_latencies` (a distribution in milliseconds with
a `latency_type` label) read with the 95th-percentile aligner.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from components import cloud_monitoring
from components.cloud_names import encryption_spec, vertex_endpoint
from components.serving.deploy_options import (
    DeployOptions,
    PrivateServiceConnect,
    endpoint_region,
)
from components.serving.rollout import Figures
from trainer.common.cloud_calls import remote_call
from trainer.common.errors import StageError

METRICS = "aiplatform.googleapis.com/prediction/online/"
#: Marks the deployed models a run deployed (a DeployedModel has no labels): the exit
#: handler finds a run's canary by it.
CANARY_PREFIX = "canary of "
#: The endpoint's label that keeps an old model at 0 % after a promotion: its key names the
#: deployed model, its value the Unix second its grace period ends. Labels are the
#: endpoint's own (Endpoint.labels: keys and values at most 64 characters of lowercase
#: letters, digits, underscores and dashes, keys starting with a letter).
KEPT_LABEL = "gpu-pipeline-retire-"


class EndpointError(StageError):
    """The endpoint is not in a state a rollout can start from."""


@dataclasses.dataclass
class Clients:
    """The API clients a rollout uses (injected; `clients_for` makes the real ones)."""

    endpoints: Any
    models: Any
    metrics: Any


def clients_for(region: str) -> Clients:
    """Vertex AI's endpoint and model clients of a region, and Cloud Monitoring's."""
    from google.cloud import aiplatform_v1

    options = {"api_endpoint": vertex_endpoint(region)}
    return Clients(aiplatform_v1.EndpointServiceClient(client_options=options),
                   aiplatform_v1.ModelServiceClient(client_options=options),
                   cloud_monitoring.metrics_client())


def find_or_create(clients: Clients, project: str, region: str, endpoint: str, *,
                   create: bool = True, encryption_key: str = "",
                   private: PrivateServiceConnect | None = None) -> Any:
    """The endpoint named by its resource name, or the one with that display name
    (created the first time, with `encryption_key` and `private` when given, unless
    `create` is False: then None).

    Raises:
        EndpointError: `private` is enabled but the endpoint found is public (an endpoint's
            Private Service Connect setting is fixed when it is created).
    """
    if endpoint_region(endpoint) is not None:
        with remote_call(f"reading the endpoint {endpoint}"):
            found = clients.endpoints.get_endpoint(name=endpoint)
        return _as_configured(found, private)
    return _by_display_name(clients, project, region, endpoint, create, encryption_key, private)


def _as_configured(endpoint: Any, private: PrivateServiceConnect | None) -> Any:
    if private is not None and private.enabled and endpoint is not None and \
            not endpoint.private_service_connect_config.enable_private_service_connect:
        raise EndpointError(
            f"vertex.deploy.private_service_connect is set but the endpoint {endpoint.name} "
            f"({endpoint.display_name}) is public, and an endpoint's Private Service Connect "
            "setting is fixed when it is created: name a new endpoint in vertex.deploy."
            "endpoint (the deploy stage creates it), or remove private_service_connect")
    return endpoint


def _by_display_name(clients: Clients, project: str, region: str, endpoint: str,
                     create: bool, encryption_key: str,
                     private: PrivateServiceConnect | None) -> Any:
    from google.cloud import aiplatform_v1

    parent = f"projects/{project}/locations/{region}"
    with remote_call(f"looking for the endpoint {endpoint!r}"):
        found = list(clients.endpoints.list_endpoints(request=aiplatform_v1.ListEndpointsRequest(
            parent=parent, filter=f'display_name="{endpoint}"')))
    if len(found) > 1:
        raise EndpointError(f"{len(found)} endpoints in {region} are named {endpoint!r} ("
                            + ", ".join(e.name for e in found) + "); set vertex.deploy.endpoint "
                            "to the resource name of the one to use")
    if found or not create:
        return _as_configured(found[0], private) if found else None
    psc = aiplatform_v1.PrivateServiceConnectConfig(
        enable_private_service_connect=True, project_allowlist=private.project_allowlist) \
        if private is not None and private.enabled else None
    with remote_call(f"creating the endpoint {endpoint!r}"):
        return clients.endpoints.create_endpoint(parent=parent, endpoint=aiplatform_v1.Endpoint(
            display_name=endpoint, encryption_spec=encryption_spec(encryption_key),
            private_service_connect_config=psc)).result()


class VertexEndpoint:
    """A rollout of `model` (`projects/.../models/ID@VERSION`) on a Vertex AI endpoint.

    Args:
        clients: The API clients.
        endpoint: The Endpoint resource, as read.
        model: The new model version's resource name.
        rule: The deploy options (machine, replicas).
        run: The pipeline job's name (the canary's display name carries it).
        clock: Wall-clock seconds (the metrics' interval).
    """

    def __init__(self, clients: Clients, endpoint: Any, model: str, rule: DeployOptions,
                 run: str, clock: Callable[[], float] = time.time):
        self.clients, self.endpoint, self.model, self.rule = clients, endpoint, model, rule
        self.run, self.clock = run, clock
        self.name = endpoint.name
        self.canary_id = ""
        self.champion_id = serving_id(endpoint)
        self.started = 0.0

    def champion(self) -> str | None:
        if not self.champion_id:
            return None
        deployed = next(d for d in self.endpoint.deployed_models if d.id == self.champion_id)
        return f"deployed model {deployed.id} ({model_version(deployed)})"

    def deploy(self, percent: int) -> str:
        from google.cloud import aiplatform_v1

        split = {"0": percent, **({self.champion_id: 100 - percent} if percent < 100 else {})}
        deployed = aiplatform_v1.DeployedModel(
            model=self.model, display_name=f"{CANARY_PREFIX}{self.run}"[:128],
            dedicated_resources=aiplatform_v1.DedicatedResources(
                machine_spec=aiplatform_v1.MachineSpec(**self.rule.machine_spec()),
                min_replica_count=self.rule.min_replica_count,
                max_replica_count=self.rule.max_replica_count))
        with remote_call(f"deploying {self.model} to {self.name}"):
            response = self.clients.endpoints.deploy_model(
                endpoint=self.name, deployed_model=deployed, traffic_split=split).result()
        self.canary_id = response.deployed_model.id
        self.started = self.clock()
        return f"deployed model {self.canary_id} ({self.model})"

    def figures(self) -> tuple[Figures, Figures | None]:
        canary = self._figures(self.canary_id)
        return canary, self._figures(self.champion_id) if self.champion_id else None

    def promote(self) -> None:
        split = {self.canary_id: 100, **({self.champion_id: 0} if self.champion_id else {})}
        self._set_traffic(split)
        with remote_call(f"making {self.model} the default version"):
            self.clients.models.merge_version_aliases(name=self.model,
                                                      version_aliases=["default"])

    def retire(self) -> None:
        if self.champion_id:
            self._undeploy(self.champion_id, {self.canary_id: 100})

    def keep_old(self, seconds: float) -> str:
        until = int(self.clock() + seconds)
        if self.champion_id:
            self._set_labels({**self._labels(), f"{KEPT_LABEL}{self.champion_id}": str(until)})
        return _utc(until)

    def retire_expired(self) -> list[str]:
        labels, done = self._labels(), []
        deployed = {d.id: d for d in self.endpoint.deployed_models}
        split = dict(self.endpoint.traffic_split)
        for key, value in sorted(labels.items()):
            if not key.startswith(KEPT_LABEL):
                continue
            deployed_id = key[len(KEPT_LABEL):]
            until = int(value) if value.isdigit() else 0
            if deployed_id in deployed and until > self.clock():
                continue  # still in its grace period
            del labels[key]
            if deployed_id not in deployed:
                continue  # undeployed by someone else meanwhile
            model = model_version(deployed[deployed_id])
            if split.get(deployed_id, 0) > 0:
                done.append(f"deployed model {deployed_id} ({model}) serves "
                            f"{split[deployed_id]}% of the traffic again: kept")
                continue
            self._undeploy(deployed_id, {})  # it has no traffic: the split stays
            done.append(f"the old model {deployed_id} ({model}) is undeployed, its grace "
                        f"period over since {_utc(until)}")
        if labels != self._labels():
            self._set_labels(labels)
        return done

    def roll_back(self) -> None:
        if self.canary_id:
            self._undeploy(self.canary_id, {self.champion_id: 100})

    def _set_traffic(self, split: dict[str, int]) -> None:
        from google.cloud import aiplatform_v1
        from google.protobuf import field_mask_pb2

        with remote_call(f"setting the traffic of {self.name} to {split}"):
            self.clients.endpoints.update_endpoint(
                endpoint=aiplatform_v1.Endpoint(name=self.name, traffic_split=split),
                update_mask=field_mask_pb2.FieldMask(paths=["traffic_split"]))

    def _labels(self) -> dict[str, str]:
        return dict(self.endpoint.labels)

    def _set_labels(self, labels: dict[str, str]) -> None:
        from google.cloud import aiplatform_v1
        from google.protobuf import field_mask_pb2

        with remote_call(f"setting the labels of {self.name}"):
            self.endpoint = self.clients.endpoints.update_endpoint(
                endpoint=aiplatform_v1.Endpoint(name=self.name, labels=labels),
                update_mask=field_mask_pb2.FieldMask(paths=["labels"]))

    def _undeploy(self, deployed_id: str, split: dict[str, int]) -> None:
        with remote_call(f"undeploying deployed model {deployed_id} from {self.name}"):
            self.clients.endpoints.undeploy_model(
                endpoint=self.name, deployed_model_id=deployed_id, traffic_split=split).result()

    def _figures(self, deployed_id: str) -> Figures:
        project, endpoint_id = self.name.split("/")[1], self.name.rsplit("/", 1)[-1]
        now = self.clock()
        # Cloud Monitoring aligns over whole periods of at least 60 s.
        period = max(60, int(now - self.started) + 1)
        read = _SeriesReader(self.clients.metrics, project, endpoint_id, deployed_id,
                             self.started, now, period)
        requests = int(read.total("response_count"))
        errors = int(read.total("error_count"))
        p95_ms = read.percentile_95("prediction_latencies", 'metric.labels.latency_type="total"')
        return Figures(requests, errors, None if p95_ms is None else p95_ms / 1000)


@dataclasses.dataclass
class _SeriesReader:
    client: Any
    project: str
    endpoint_id: str
    deployed_id: str
    start: float
    end: float
    period: int

    def _series(self, metric: str, aligner: str, extra: str = "") -> list[Any]:
        query = (f'metric.type="{METRICS}{metric}" AND '
                 'resource.type="aiplatform.googleapis.com/Endpoint" AND '
                 f'resource.labels.endpoint_id="{self.endpoint_id}" AND '
                 f'metric.labels.deployed_model_id="{self.deployed_id}"'
                 + (f" AND {extra}" if extra else ""))
        return cloud_monitoring.list_series(
            self.client, self.project, query, self.start, self.end,
            f"{metric} of deployed model {self.deployed_id}", period=self.period,
            aligner=aligner)

    def total(self, metric: str) -> float:
        return sum(cloud_monitoring.number(point.value)
                   for series in self._series(metric, "ALIGN_SUM") for point in series.points)

    def percentile_95(self, metric: str, extra: str) -> float | None:
        values = [cloud_monitoring.number(point.value) for series in
                  self._series(metric, "ALIGN_PERCENTILE_95", extra) for point in series.points]
        return max(values) if values else None


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def serving_id(endpoint: Any) -> str:
    """The deployed model with the most traffic ("" when none has any)."""
    split = dict(endpoint.traffic_split)
    served = [(percent, deployed_id) for deployed_id, percent in split.items() if percent > 0]
    return max(served)[1] if served else ""


def model_version(deployed: Any) -> str:
    """A DeployedModel's model as `projects/.../models/ID@VERSION`."""
    return f"{deployed.model}@{deployed.model_version_id}" if deployed.model_version_id \
        else deployed.model


def restore_champion(clients: Clients, endpoint: Any, run: str) -> str | None:
    """The exit handler's part: a canary this run left with less than all the traffic is
    undeployed and its traffic given back to the model that had the most. Returns what was
    done, or None when nothing was left mid-rollout."""
    split = dict(endpoint.traffic_split)
    for deployed in endpoint.deployed_models:
        if deployed.display_name != f"{CANARY_PREFIX}{run}"[:128] or split.get(deployed.id) == 100:
            continue
        others = {k: v for k, v in split.items() if k != deployed.id}
        champion = max(others, key=lambda k: others[k]) if others else ""
        back = {champion: 100} if champion else {}
        with remote_call(f"undeploying the canary {deployed.id} from {endpoint.name}"):
            clients.endpoints.undeploy_model(endpoint=endpoint.name,
                                             deployed_model_id=deployed.id,
                                             traffic_split=back).result()
        return (f"the canary {deployed.id} was undeployed"
                + (f" and deployed model {champion} has all the traffic again"
                   if champion else ""))
    return None
