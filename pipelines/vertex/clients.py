"""The API clients the Vertex path uses; None ones are created when needed."""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.gcs import storage_client
from trainer.remote import remote_call


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
    quotas: Any = None  # Cloud Quotas client (ListQuotaInfos)
    jobs: Any = None  # Vertex AI JobServiceClient for every region (tests); else per region
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
            from pipelines.vertex.iam import projects_client

            with remote_call("connecting to Resource Manager"):
                self.projects = projects_client()
        return self.projects

    def get_quotas(self) -> Any:
        """The Cloud Quotas client (the default one unless given)."""
        if self.quotas is None:
            from components.capacity.quotas import quotas_client

            with remote_call("connecting to Cloud Quotas"):
                self.quotas = quotas_client()
        return self.quotas

    def get_jobs(self, region: str) -> Any:
        """A Vertex AI JobServiceClient for `region` (the given one, else the region's)."""
        if self.jobs is not None:
            return self.jobs
        if region not in self._regional:
            from components.capacity.launcher import jobs_client

            with remote_call(f"connecting to Vertex AI in {region}"):
                self._regional[region] = jobs_client(region)
        return self._regional[region]

    def get_iam(self) -> tuple[Any, str]:
        """(an HTTP session for the IAM API, its endpoint)."""
        from pipelines.vertex.iam import IAM_ENDPOINT, iam_session

        if self.iam is None:
            with remote_call("connecting to IAM"):
                self.iam = iam_session()
        return self.iam, self.iam_endpoint or IAM_ENDPOINT
