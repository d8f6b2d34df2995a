"""The training step's launch on Vertex AI, wired from the pipeline's options: each of
stage 1's alternatives as a CustomJob of the trainer with its own training plan, the
regions' JobServiceClients, the quota check before each try, and the jobs an earlier run
of the step left (`components.capacity.launcher` decides; this module only assembles what
it is given).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from components.capacity import quotas
from components.capacity.following import (
    POLL_SECONDS,
    REQUEST_TIMEOUT,
    RETRY_FIRST_DELAY,
    Watch,
)
from components.capacity.launcher import Launch, Result, launch
from components.cloud_names import vertex_endpoint
from components.durations import duration_seconds
from components.gpu.alternatives import Alternative


def jobs_client(region: str) -> Any:
    """A Vertex AI JobServiceClient of a region's endpoint, with the default credentials."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.JobServiceClient(
        client_options={"api_endpoint": vertex_endpoint(region)})


def quota_checker(client: Any, project: str, log: Callable[[str], None]
                  ) -> Callable[[Alternative], str]:
    """Why an alternative's quota is below its need ("" if not, or if the quotas cannot be
    read: then Vertex AI decides), reading the project's quotas once per call."""
    def check(alternative: Alternative) -> str:
        try:
            infos = quotas.read_quota_infos(client, project)
        except Exception as exc:  # noqa: BLE001 - a reading problem must not stop training
            log(f"capacity: the quotas could not be read ({exc}); trying {alternative.label}")
            return ""
        found = quotas.check(quotas.needs(alternative.pools, alternative.region,
                                          alternative.scheduling_strategy), infos)
        return "; ".join(q.describe(project) for q in found if q.refused)
    return check


def reservation_checker(read: Callable[[str], Any], project: str, log: Callable[[str], None]
                        ) -> Callable[[Alternative], str]:
    """Why an alternative's reservations cannot hold it now ("" if they can, if it names
    none, or if Compute Engine cannot answer: then Vertex AI decides), read at its turn."""
    from components.capacity.reserved import why_not

    def check(alternative: Alternative) -> str:
        try:
            return why_not(alternative, read, project)
        except Exception as exc:  # noqa: BLE001 - a reading problem must not stop training
            log(f"capacity: the reservations of {alternative.label} could not be read "
                f"({exc}); trying it")
            return ""
    return check


def both(*checks: Callable[[Alternative], str]) -> Callable[[Alternative], str]:
    """The first reason any of `checks` gives."""
    return lambda alternative: next((r for r in (c(alternative) for c in checks) if r), "")


def run_training_job(project: str, alternatives: Sequence[Mapping[str, Any]],
                     images: Mapping[str, Any], *, dataset_path: str, output_uri: str,
                     output_path: str, training: Mapping[str, Any], vertex: Mapping[str, Any],
                     gcp_resources_path: str, log: Callable[[str], None],
                     before: float = 0.0) -> Result:
    """Stage 4 on Vertex AI: stage 1's alternatives, each as a CustomJob of the trainer
    with its own training plan, tried in order until one trains (`launch`); the jobs an
    earlier run of the step created are followed first. Under `vertex.budget_usd` the
    jobs are held to what the run leaves after `before`, what it cost before training
    (`run_cost.before_training`).

    Raises:
        TrainingJobError, LostJobError, NoCapacityError: As `launch`.
    """
    from components.capacity.job_records import find_earlier, job_labels
    from components.training.vertex_job import custom_job, custom_job_spec, trainer_flags
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
    trainer = validate(TrainingOptions, training, prefix="training", strict=False)
    # One display name for every attempt: the same run's training, wherever it ran.
    checked = [Alternative.from_dict(a) for a in alternatives]
    name = custom_job_spec(checked[0].pools, images, dataset_path=dataset_path,
                           output_uri=output_uri, output_path=output_path,
                           job_name=options.job_name)["display_name"]

    def make_job(alternative: Alternative) -> Any:
        spec = custom_job_spec(alternative.pools, images,
                               dataset_path=dataset_path, output_uri=output_uri,
                               output_path=output_path, job_name=options.job_name,
                               trainer_args=trainer_flags(trainer, alternative.plan.to_dict()))
        return custom_job({**spec, "display_name": name}, options,
                          alternative.scheduling_strategy,
                          labels=job_labels(options.labels, alternative.index))

    clients: dict[str, Any] = {}

    def jobs_for(region: str) -> Any:
        if region not in clients:
            clients[region] = jobs_client(region)
        return clients[region]

    import time

    from components.capacity.budget import guard_for, hold
    from components.prices.price_list import PriceBook

    # Read when the budget first needs them, once for the step: at its start, not at submit
    # (prices move).
    book = PriceBook.of(options, log=log)
    from components.capacity.reserved import reader
    from trainer.common.cloud_calls import authorized_session

    session: list[Any] = []  # made at the first reserved alternative's turn

    def read(name: str) -> Any:
        if not session:
            session.append(authorized_session())
        return reader(session[0])(name)

    how = Launch(project, make_job, jobs_for,
                 both(reservation_checker(read, project, log),
                      quota_checker(quotas.quotas_client(), project, log)), log,
                 rounds=options.capacity_rounds,
                 backoff_seconds=duration_seconds(options.capacity_backoff) or 0.0,
                 queue_limit_seconds=duration_seconds(options.queue_limit) or 0.0,
                 find_earlier=lambda: find_earlier(project, [a.region for a in checked],
                                                   jobs_for, gcp_resources_path, log),
                 gcp_resources_path=gcp_resources_path,
                 watch=Watch(log, poll_seconds=POLL_SECONDS,
                             retry_first_delay=RETRY_FIRST_DELAY,
                             request_timeout=REQUEST_TIMEOUT),
                 guard_for=guard_for(options, trainer.total_epochs, output_path, time.time,
                                     before, book),
                 hold=lambda found: hold(options, found, log, lambda: step_evidence(
                     options, trainer, project, dataset_path, log), before, book))
    return launch(checked, how)


def step_evidence(options: Any, trainer: Any, project: str, dataset_path: str,
                  log: Callable[[str], None]) -> Any:
    """What the training step estimates its configurations' hours from
    (`training_hours.Evidence`): the prepared dataset's size and image size, the GPU
    benchmark's results under `training.measurements`, and the newest registered model
    (a registry that cannot be read is said, and the estimate goes on without it)."""
    from components.capacity.measured_speed import newest_measured
    from components.capacity.training_hours import Evidence, epoch_images, validation_images
    from trainer.cluster.measurements import load
    from trainer.common.contract import load_manifest
    from trainer.common.errors import ProjectError
    from trainer.common.gcs import to_mount_path

    manifest = load_manifest(to_mount_path(dataset_path))
    try:
        registered = newest_measured(options, project)
    except ProjectError as exc:
        log(f"budget: the newest measured run could not be read ({exc})")
        registered = None
    return Evidence(epochs=trainer.total_epochs, timeout=options.timeout, model=trainer.model,
                    batch=trainer.batch_size, image_size=int(manifest["image_size"][0]),
                    images=epoch_images(manifest), images_from="the prepared dataset",
                    validation_images=validation_images(manifest),
                    registered=registered, measurements=load(trainer.measurements))
