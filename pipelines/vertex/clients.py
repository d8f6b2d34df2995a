"""The API clients the Vertex path uses (None ones are created when needed), and the JSON
body a request sends (what dry runs print)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from trainer.common.cloud_calls import remote_call
from trainer.common.gcs import storage_client

#: The IAM API (testIamPermissions of service accounts).
IAM_ENDPOINT = "https://iam.googleapis.com"
KMS_ENDPOINT = "https://cloudkms.googleapis.com"


@dataclasses.dataclass
class Clients:
    """Clients for Cloud Storage, Cloud Build, Artifact Registry, Cloud Quotas and Vertex AI.

    Tests pass a Cloud Storage client for an emulator on loopback and recording clients
    for the APIs no test can reach.
    """

    storage: Any = None
    build: Any = None
    registry: Any = None
    pipeline_api: Any = None  # replaces PipelineJob.api_client
    schedule_api: Any = None  # replaces PipelineJobSchedule.api_client / ScheduleService
    model_api: Any = None  # replaces the ModelServiceClient of `models list`
    projects: Any = None  # Resource Manager ProjectsClient (testIamPermissions)
    iam: Any = None  # an HTTP session for the IAM API
    iam_endpoint: str = ""  # where that API is; IAM's own unless given
    kms_endpoint: str = ""  # where Cloud KMS's API is (the IAM session calls it)
    quotas: Any = None  # Cloud Quotas client (ListQuotaInfos)
    jobs: Any = None  # Vertex AI JobServiceClient for every region (tests); else per region
    persistent: Any = None  # Vertex AI PersistentResourceServiceClient (tests); else made
    billing: Any = None  # makes a Cloud Billing CloudCatalogClient (tests); else the default
    compute: Any = None  # an HTTP session for Compute Engine's API (reservations)
    compute_endpoint: str = ""  # where that API is; Compute Engine's own unless given
    refresh_prices: bool = False  # read the price catalog even when today's is cached
    _regional: dict = dataclasses.field(default_factory=dict)

    def get_storage(self) -> Any:
        """The Cloud Storage client (the default one unless given)."""
        if self.storage is None:
            with remote_call("connecting to Cloud Storage"):
                self.storage = storage_client()
        return self.storage

    def get_builders(self) -> tuple[Any, Any]:
        """The Cloud Build and Artifact Registry clients (the default ones unless given)."""
        if self.build is None or self.registry is None:
            from components.build.build_images import cloud_clients

            with remote_call("connecting to Cloud Build and Artifact Registry"):
                _, self.build, self.registry = cloud_clients()
        return self.build, self.registry

    def get_projects(self) -> Any:
        """The Resource Manager ProjectsClient (the default one unless given)."""
        if self.projects is None:
            with remote_call("connecting to Resource Manager"):
                self.projects = projects_client()
        return self.projects

    def price_book(self, vertex: Any, log: Callable[[str], None] | None = None) -> Any:
        """The prices of a run (`components.prices.price_list.PriceBook`) with `vertex`'s
        (VertexOptions) `prices` over them, read through this session's catalog client."""
        from components.prices.price_list import PriceBook

        return PriceBook.of(vertex, client=self.billing, refresh=self.refresh_prices, log=log)

    def get_quotas(self) -> Any:
        """The Cloud Quotas client (the default one unless given)."""
        if self.quotas is None:
            from components.capacity.quotas import quotas_client

            with remote_call("connecting to Cloud Quotas"):
                self.quotas = quotas_client()
        return self.quotas

    def get_jobs(self, region: str) -> Any:
        """A Vertex AI JobServiceClient for `region` (the given one, else the region's)."""
        from components.capacity.vertex_launch import jobs_client

        return self._in_region(self.jobs, region, jobs_client)

    def get_persistent(self, region: str) -> Any:
        """A Vertex AI PersistentResourceServiceClient for `region` (the given one, else
        the region's)."""
        return self._in_region(self.persistent, region, persistent_client)

    def _in_region(self, given: Any, region: str, make: Callable[[str], Any]) -> Any:
        """`given` (tests), else the client `make` makes for `region`, made once: Vertex AI
        answers a region's resources at that region's endpoint only."""
        if given is not None:
            return given
        if (make, region) not in self._regional:
            with remote_call(f"connecting to Vertex AI in {region}"):
                self._regional[make, region] = make(region)
        return self._regional[make, region]

    def get_iam(self) -> tuple[Any, str]:
        """(an HTTP session for the IAM API, its endpoint)."""
        if self.iam is None:
            with remote_call("connecting to IAM"):
                self.iam = iam_session()
        return self.iam, self.iam_endpoint or IAM_ENDPOINT

    def get_compute(self) -> tuple[Any, str]:
        """(an HTTP session for Compute Engine's API, its endpoint)."""
        from components.capacity.reserved import COMPUTE_ENDPOINT

        if self.compute is None:
            with remote_call("connecting to Compute Engine"):
                self.compute = iam_session()
        return self.compute, self.compute_endpoint or COMPUTE_ENDPOINT

    def get_kms(self) -> tuple[Any, str]:
        """(an HTTP session for Cloud KMS's API, its endpoint): the IAM session, which
        carries the cloud-platform scope."""
        session, _ = self.get_iam()
        return session, self.kms_endpoint or KMS_ENDPOINT


def iam_session() -> Any:
    """An authorized HTTP session with the default credentials."""
    from trainer.common.cloud_calls import authorized_session

    return authorized_session()


def projects_client() -> Any:
    """A Resource Manager ProjectsClient with the default credentials."""
    from google.cloud import resourcemanager_v3

    return resourcemanager_v3.ProjectsClient()


def persistent_client(region: str) -> Any:
    """A Vertex AI PersistentResourceServiceClient at `region`'s endpoint."""
    from google.cloud import aiplatform_v1

    from components.cloud_names import vertex_endpoint

    return aiplatform_v1.PersistentResourceServiceClient(
        client_options={"api_endpoint": vertex_endpoint(region)})


def to_json(message: Any) -> str:
    """A proto-plus request as the JSON body the API receives."""
    return type(message).to_json(message, indent=2, use_integers_for_enums=False,
                                 always_print_fields_with_no_presence=False)
