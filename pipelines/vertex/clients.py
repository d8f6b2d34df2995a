"""The API clients the Vertex path uses; None ones are created when needed."""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.gcs import storage_client


@dataclasses.dataclass
class Clients:
    """Clients for Cloud Storage, Cloud Build, Artifact Registry and Vertex AI.

    Tests pass a Cloud Storage client for an emulator on loopback and recording clients
    for the APIs no test can reach.
    """

    storage: Any = None
    build: Any = None
    registry: Any = None
    pipeline_api: Any = None  # replaces PipelineJob.api_client
    schedule_api: Any = None  # replaces PipelineJobSchedule.api_client / ScheduleService

    def get_storage(self) -> Any:
        """The Cloud Storage client (the default one unless given)."""
        if self.storage is None:
            self.storage = storage_client()
        return self.storage

    def get_builders(self) -> tuple[Any, Any]:
        """The Cloud Build and Artifact Registry clients (the default ones unless given)."""
        if self.build is None or self.registry is None:
            from components.build.stage import cloud_clients

            _, self.build, self.registry = cloud_clients()
        return self.build, self.registry
