"""Google API clients for the tests: real client libraries pointed at the fake APIs on
loopback (`tests.support.vertex_emulator.apis`), and a recording stand-in for the Vertex AI
clients of `submit` and `schedule`."""

from __future__ import annotations

import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, artifactregistry_v1, resourcemanager_v3, storage
from google.cloud.devtools import cloudbuild_v1

from pipelines.vertex.clients import Clients


def rest_client(kind, apis):
    """A Google client library's REST client of `kind`, pointed at the fake APIs."""
    return kind(transport="rest", client_options={"api_endpoint": apis.url},
                credentials=AnonymousCredentials())


def monitoring_client(apis):
    """Cloud Monitoring's client (gRPC only) on the fake's ListTimeSeries."""
    import grpc
    from google.cloud import monitoring_v3
    from google.cloud.monitoring_v3.services.metric_service.transports import (
        MetricServiceGrpcTransport,
    )

    address = apis.monitoring_address or apis.start_monitoring()
    return monitoring_v3.MetricServiceClient(
        transport=MetricServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def iam_clients(apis):
    """The clients the IAM pre-flight asks, pointed at the fake APIs."""
    bucket_iam = storage.Client(project="my-proj", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": apis.url})
    return Clients(storage=bucket_iam,
                   projects=rest_client(resourcemanager_v3.ProjectsClient, apis),
                   build=rest_client(cloudbuild_v1.CloudBuildClient, apis),
                   registry=rest_client(artifactregistry_v1.ArtifactRegistryClient, apis),
                   iam=requests.Session(), iam_endpoint=apis.url,
                   compute=requests.Session(), compute_endpoint=apis.url)


class RecordingApi:
    """Stands in for the Vertex AI API clients: records each request, echoes the resource;
    with `require_cmek`, refuses a PipelineJob without a customer-managed key as the org
    policy constraints/gcp.restrictNonCmekServices does (`cmek_refusal`)."""

    def __init__(self):
        self.calls = []
        self.require_cmek = False

    def create_pipeline_job(self, parent, pipeline_job, pipeline_job_id=None, timeout=None):
        from google.api_core import exceptions

        from tests.support.vertex_emulator.apis import cmek_refusal

        refused = self.require_cmek and cmek_refusal(
            f"/v1/{parent}/pipelineJobs",
            {"encryptionSpec": {"kmsKeyName": pipeline_job.encryption_spec.kms_key_name}})
        if refused:
            raise exceptions.FailedPrecondition(refused)
        self.calls.append(aiplatform_v1.CreatePipelineJobRequest(
            parent=parent, pipeline_job=pipeline_job, pipeline_job_id=pipeline_job_id))
        created = aiplatform_v1.PipelineJob(pipeline_job)
        created.name = f"{parent}/pipelineJobs/{pipeline_job_id}"
        return created

    def create_schedule(self, parent, schedule, timeout=None):
        self.calls.append(aiplatform_v1.CreateScheduleRequest(parent=parent, schedule=schedule))
        created = aiplatform_v1.Schedule(schedule)
        created.name = f"{parent}/schedules/42"
        return created

    def list_schedules(self, request):
        self.calls.append(request)
        return [aiplatform_v1.Schedule(name=f"{request.parent}/schedules/42",
                                       display_name="gpu-pipeline-weekly", cron="0 3 * * 1")]

    def pause_schedule(self, request):
        self.calls.append(request)

    resume_schedule = delete_schedule = pause_schedule


def model_pages(method, request, models=()):
    """What ModelServiceClient's list_models or list_model_versions returns: Google's own
    pager over one page of `models` (aiplatform_v1.Model)."""
    from google.cloud.aiplatform_v1.services.model_service import pagers

    if isinstance(request, aiplatform_v1.ListModelVersionsRequest):
        return pagers.ListModelVersionsPager(
            method, request, aiplatform_v1.ListModelVersionsResponse(models=list(models)))
    return pagers.ListModelsPager(method, request,
                                  aiplatform_v1.ListModelsResponse(models=list(models)))
