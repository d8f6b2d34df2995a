"""Scheduled retraining: a PipelineJobSchedule around the run `submit` would send."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from components.cloud_names import vertex_endpoint
from components.stage_messages import say
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from pipelines.vertex.dry_run import NOTHING_SENT, show
from pipelines.vertex.preflight import VertexSettingsError
from pipelines.vertex.runs import prepared_run, summary
from trainer.common.cloud_calls import remote_call
from trainer.common.schema import short


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
                    credentials: Any = None, log: Callable[[str], None] = say,
                    verbose: bool = False) -> Any:
    """Creates a PipelineJobSchedule for scheduled retraining (or shows it: its body too
    with `verbose`)."""
    from google.cloud import aiplatform

    from pipelines.vertex.cost_estimate import NewestSpeed, hold_budget

    clients = clients or Clients()
    # Before anything is created.
    config = hold_budget(config, NewestSpeed(config, clients, log), log)
    with prepared_run(config, dry_run, clients, credentials, log) as (prepared, credentials):
        request = schedule_request(config, prepared.request)
        if dry_run:
            log("Vertex AI would receive this CreateScheduleRequest:")
            show(request, log, verbose=verbose)
            for line in summary(prepared, config):
                log(line)
            s = config.schedule
            log(f"schedule {s.display_name}: cron {s.cron!r} in {s.zone()}; next runs "
                + ", ".join(t.strftime("%a %Y-%m-%d %H:%M %Z") for t in s.next_runs(3)))
            log(NOTHING_SENT + ("" if verbose else " (--verbose prints the request body)"))
            return request
        schedule = aiplatform.PipelineJobSchedule(
            pipeline_job=prepared.job, display_name=config.schedule.display_name,
            project=config.vertex.project, location=config.vertex.region,
            credentials=credentials)
        if clients.schedule_api is not None:
            schedule.api_client = clients.schedule_api
        s = config.schedule
        with remote_call("creating the schedule"):
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
        "api_endpoint": vertex_endpoint(config.vertex.region)})


def _parent(config: Config) -> str:
    if not config.vertex.project:
        raise VertexSettingsError("vertex.project must be set to manage schedules (in the "
                                  "config file or with --project)")
    return f"projects/{config.vertex.project}/locations/{config.vertex.region}"


def schedule_name(config: Config, schedule: str) -> str:
    """The resource name of a schedule given by ID or resource name.

    Raises:
        VertexSettingsError: Neither a schedule ID nor a schedule resource name.
    """
    if re.fullmatch(r"projects/[^/\s]+/locations/[a-z0-9-]+/schedules/[0-9]+", schedule):
        return schedule
    if re.fullmatch(r"[0-9]{1,20}", schedule):
        return f"{_parent(config)}/schedules/{schedule}"
    raise VertexSettingsError(f"schedule {short(schedule)} is neither a schedule ID (digits) "
                              "nor projects/PROJECT/locations/REGION/schedules/ID")


def list_request(config: Config) -> Any:
    """The ListSchedulesRequest of the project's schedules in the region."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.ListSchedulesRequest(parent=_parent(config),
                                              order_by="create_time desc")


def list_schedules(config: Config, clients: Clients | None = None) -> list[Any]:
    """The project's schedules in the region (display name, state, cron, last and next run)."""
    request = list_request(config)
    with remote_call("listing the schedules"):
        return list(_schedule_client(config, clients).list_schedules(request=request))


#: Action -> (request type, client method) of the schedule commands that change one.
ACTIONS = {"pause": ("PauseScheduleRequest", "pause_schedule"),
           "resume": ("ResumeScheduleRequest", "resume_schedule"),
           "delete": ("DeleteScheduleRequest", "delete_schedule")}


def change_request(config: Config, action: str, schedule: str) -> Any:
    """The request that pauses, resumes or deletes a schedule."""
    from google.cloud import aiplatform_v1

    return getattr(aiplatform_v1, ACTIONS[action][0])(name=schedule_name(config, schedule))


def change_schedule(config: Config, action: str, schedule: str,
                    clients: Clients | None = None) -> str:
    """Pauses, resumes or deletes a schedule; returns its resource name."""
    request = change_request(config, action, schedule)
    with remote_call(f"{action} of {request.name}"):
        outcome = getattr(_schedule_client(config, clients), ACTIONS[action][1])(
            request=request)
        if action == "delete" and hasattr(outcome, "result"):
            outcome.result()  # a long-running operation
    return request.name


def describe(schedule: Any) -> str:
    """One line per schedule: name, display name, state, cron, last and next run."""
    def when(value: Any) -> str:
        return value.isoformat() if value else "-"

    last = getattr(schedule, "last_scheduled_run_response", None)
    return (f"{schedule.name}  {schedule.display_name}  {schedule.state.name}  "
            f"cron {schedule.cron!r}  last: {when(last.scheduled_run_time if last else None)}  "
            f"next: {when(schedule.next_run_time)}")
