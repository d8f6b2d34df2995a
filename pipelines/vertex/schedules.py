"""Scheduled retraining: a PipelineJobSchedule around the run `submit` would send."""

from __future__ import annotations

from typing import Any, Callable

from components.stage import say
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from pipelines.vertex.runs import prepared_run, summary, to_json


def schedule_request(config: Config, create: Any) -> Any:
    """The CreateScheduleRequest of a recurring run around a CreatePipelineJobRequest."""
    from google.cloud import aiplatform_v1

    s = config.schedule
    schedule = aiplatform_v1.Schedule(
        display_name=s.display_name, cron=s.cron,
        max_concurrent_run_count=s.max_concurrent_run_count,
        max_run_count=s.max_run_count or None,
        create_pipeline_job_request=create)
    return aiplatform_v1.CreateScheduleRequest(parent=create.parent, schedule=schedule)


def create_schedule(config: Config, *, dry_run: bool, clients: Clients | None = None,
                    credentials: Any = None, log: Callable[[str], None] = say) -> Any:
    """Creates a PipelineJobSchedule for scheduled retraining (or prints it)."""
    from google.cloud import aiplatform

    clients = clients or Clients()
    with prepared_run(config, dry_run, clients, credentials, log) as (prepared, credentials):
        request = schedule_request(config, prepared.request)
        if dry_run:
            log("dry run: Vertex AI would receive this CreateScheduleRequest:")
            print(to_json(request))
            for line in summary(prepared, config):
                log(line)
            return request
        schedule = aiplatform.PipelineJobSchedule(
            pipeline_job=prepared.job, display_name=config.schedule.display_name,
            project=config.vertex.project, location=config.vertex.region,
            credentials=credentials)
        if clients.schedule_api is not None:
            schedule.api_client = clients.schedule_api
        s = config.schedule
        schedule.create(cron=s.cron, max_concurrent_run_count=s.max_concurrent_run_count,
                        max_run_count=s.max_run_count or None,
                        service_account=config.vertex.service_account or None,
                        network=config.vertex.network or None)
        log(f"schedule created: {schedule.resource_name} ({s.cron})")
        return schedule


def _schedule_client(config: Config, clients: Clients | None) -> Any:
    if clients is not None and clients.schedule_api is not None:
        return clients.schedule_api
    from google.cloud import aiplatform_v1

    return aiplatform_v1.ScheduleServiceClient(client_options={
        "api_endpoint": f"{config.vertex.region}-aiplatform.googleapis.com"})


def list_schedules(config: Config, clients: Clients | None = None) -> list[Any]:
    """The project's schedules in the region (display name, state, cron, next run)."""
    from google.cloud import aiplatform_v1

    client = _schedule_client(config, clients)
    request = aiplatform_v1.ListSchedulesRequest(
        parent=f"projects/{config.vertex.project}/locations/{config.vertex.region}",
        order_by="create_time desc")
    return list(client.list_schedules(request=request))


def pause_schedule(config: Config, schedule: str, clients: Clients | None = None) -> str:
    """Pauses a schedule given by resource name or ID; returns its resource name."""
    from google.cloud import aiplatform_v1

    name = schedule if schedule.startswith("projects/") else (
        f"projects/{config.vertex.project}/locations/{config.vertex.region}/schedules/{schedule}")
    _schedule_client(config, clients).pause_schedule(
        request=aiplatform_v1.PauseScheduleRequest(name=name))
    return name
