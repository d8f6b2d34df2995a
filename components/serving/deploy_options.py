"""How the deploy stage rolls a promoted model out (`vertex.deploy`), declared once (see
`trainer.common.schema`).

With `endpoint` set, a model the gate makes the default is deployed beside the model the
endpoint serves as a canary with `canary_percent` of the traffic, watched, and then
promoted (all the traffic, and the registry's `default` alias) or rolled back, on its own
measured error rate and latency (`components.serving.rollout`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic
from pydantic import Field

from components.cloud_names import ProjectId, resource_region
from components.durations import duration_seconds
from trainer.common.schema import STRICT, short

#: An endpoint's resource name (Vertex AI REST reference: projects.locations.endpoints).
ENDPOINT_NAME = r"projects/[^/]+/locations/[^/]+/endpoints/[0-9]+"


class PrivateServiceConnect(pydantic.BaseModel):
    """A Private Service Connect endpoint: reached only from the allowed projects' networks,
    through a PSC endpoint (a forwarding rule) that targets its service attachment
    (Endpoint.privateServiceConnectConfig). It keeps the traffic split, so the canary
    rollout works as on a public endpoint (aiplatform's PrivateEndpoint.deploy:
    traffic_split "only supported by PSC based private endpoint")."""

    model_config = STRICT

    project_allowlist: list[ProjectId] = Field(default_factory=list, max_length=100,
                                               description=(
        "Projects whose networks may reach the endpoint (their forwarding rules); empty: "
        "no Private Service Connect, a public endpoint."))
    address: str = Field("", pattern=r"^([A-Za-z0-9.-]+|https?://[A-Za-z0-9.-]+(:[0-9]+)?)?$",
                         description=(
        "The PSC endpoint in your network that reaches the endpoint: its IP address or DNS "
        "name, where `predict --config` sends requests (https://ADDRESS/v1/ENDPOINT:predict)."),
        json_schema_extra={"valid": "an IP address or DNS name (e.g. 10.128.0.26), or a "
                                    "base URL"})

    @property
    def enabled(self) -> bool:
        return bool(self.project_allowlist)


class DeployOptions(pydantic.BaseModel):
    """The deploy stage's settings: where, on what, and the rollout rule."""

    model_config = STRICT

    endpoint: str = Field("", max_length=128, description=(
        "The endpoint that serves the champion: an existing one's resource name "
        "(projects/PROJECT/locations/REGION/endpoints/ID), or a display name the deploy stage "
        "creates once and then reuses; empty: no deploy stage."))
    canary_percent: int = Field(10, ge=1, le=99, description=(
        "The canary's share of the endpoint's traffic while it is watched."))
    machine_type: str = Field("n1-standard-4", description=(
        "The machine each serving replica runs on (checked by stage 1's rules)."))
    accelerator_type: str = Field("", description=(
        "GPU type of each serving replica, e.g. NVIDIA_TESLA_T4; empty: CPUs only."))
    accelerator_count: int = Field(0, ge=0, description="GPUs per serving replica.")
    min_replica_count: int = Field(1, ge=1, description="Serving replicas always running.")
    max_replica_count: int = Field(1, ge=1, description=(
        "Most serving replicas under load (what the serving quota must allow)."))
    watch_window: str = Field("1800s", description=(
        "How long the canary is watched before it may be promoted, e.g. 1800s; locally, "
        "the most the generated traffic may take."))
    check_interval: str = Field("60s", description=(
        "How often the canary's figures are read while it is watched; a canary over a "
        "bound with enough requests is rolled back at once."))
    min_requests: int = Field(100, ge=1, description=(
        "Requests the canary must have answered for its figures to count."))
    max_error_rate: float = Field(0.01, ge=0, le=1, description=(
        "The canary's highest error rate (errors over requests) that may be promoted."))
    max_latency_ratio: float = Field(1.5, ge=1, description=(
        "The canary's p95 latency may be at most this many times the champion's, measured "
        "in the same window (plus latency_slack_seconds)."))
    latency_slack_seconds: float = Field(0.05, ge=0, description=(
        "Added to the latency bound, so that noise on fast models is not a regression."))
    inconclusive: Literal["rollback", "promote"] = Field("rollback", description=(
        "What a canary with fewer than min_requests at the end of the window gets."))
    grace_period: str = Field("3600s", description=(
        "How long the old model stays deployed at 0% after a promotion (a quick way back), "
        "before it is undeployed; 0s: at once."))
    private_service_connect: PrivateServiceConnect = Field(
        default_factory=PrivateServiceConnect, description=(
            "A Private Service Connect endpoint instead of a public one (set when the deploy "
            "stage creates it; docs/perimeter.md)."))
    traffic_requests: int = Field(2000, ge=1, description=(
        "Locally: the most requests the generated traffic sends through the router (the "
        "test split's images, round and round) before the window is judged."))

    def problems(self) -> list[str]:
        """Rules a field's type cannot say (formats); `in_region` checks the rest."""
        found = []
        for name, value, example in (("watch_window", self.watch_window, "1800s"),
                                     ("check_interval", self.check_interval, "60s")):
            if not duration_seconds(value):
                found.append(f"{name} is {short(value)}; expected a positive number of "
                             f"seconds like '{example}'")
        if duration_seconds(self.grace_period) is None:
            found.append(f"grace_period is {short(self.grace_period)}; expected a number of "
                         "seconds like '3600s' (0s: undeploy the old model at once)")
        if self.max_replica_count < self.min_replica_count:
            found.append(f"max_replica_count is {self.max_replica_count}, below "
                         f"min_replica_count {self.min_replica_count}")
        psc = self.private_service_connect
        if psc.address and not psc.enabled:
            found.append(f"private_service_connect.address is {short(psc.address)} but its "
                         "project_allowlist is empty; list the projects whose networks reach "
                         "the endpoint, or remove the address")
        if self.endpoint.startswith("projects/") and endpoint_region(self.endpoint) is None:
            found.append(f"endpoint is {short(self.endpoint)}; expected "
                         "projects/PROJECT/locations/REGION/endpoints/ID, or a display name")
        return found

    def in_region(self, region: str) -> list[str]:
        """The endpoint's region and the serving machine under stage 1's rules, in the
        region the model is registered in (`vertex.region`)."""
        from components.gpu.validation import validate_worker_pool_specs

        found = []
        where = endpoint_region(self.endpoint)
        if where is not None and where != region:
            found.append(f"deploy.endpoint is {short(self.endpoint)}, in {where}; the model "
                         f"is registered in {region} (vertex.region), and an endpoint serves "
                         "models of its own region only")
        # One machine's rules (GPU counts per machine type, regions): stage 1's chief
        # pool holds exactly one replica, serving replicas are not a training cluster.
        pool = {"machine_spec": self.machine_spec(), "replica_count": 1}
        checked = validate_worker_pool_specs([pool], region if self.endpoint else None,
                                             labels=["deploy (the serving machine)"])
        return found + checked.errors

    def nodes(self) -> Any:
        """The canary's nodes at their most (`max_replica_count`), as a `WorkerPool` for
        the price tables (`components.capacity.cost.rate`)."""
        from components.gpu.worker_pool import WorkerPool

        return WorkerPool(role=0, machine=self.machine_type, accelerator=self.accelerator_type,
                          gpus_per_machine=(self.accelerator_count or 1)
                          if self.accelerator_type else 0, replicas=self.max_replica_count)

    def machine_spec(self) -> dict[str, Any]:
        """The serving replicas' MachineSpec, as DeployModel takes it."""
        spec: dict[str, Any] = {"machine_type": self.machine_type}
        if self.accelerator_type:
            spec.update(accelerator_type=self.accelerator_type,
                        accelerator_count=self.accelerator_count or 1)
        return spec


def endpoint_region(endpoint: str) -> str | None:
    """The region of an endpoint's resource name; None for a display name."""
    match = re.fullmatch(ENDPOINT_NAME, endpoint)
    return resource_region(endpoint) if match else None
