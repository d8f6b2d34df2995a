"""The training step on Vertex AI: a CustomJob on the first configuration with capacity.

google-cloud-pipeline-components' CustomTrainingJobOp runs one configuration; a stock-out
("Resources are insufficient in region: us-central1. Please try a different region.",
openreview/openreview-expertise#401) or a quota refusal (429 RESOURCE_EXHAUSTED, "The
following quota metrics exceed quota limits: ...", GoogleCloudPlatform/stable-diffusion-
on-gcp#12; or the job failing with code 8 and that message,
GoogleCloudPlatform/vertex-ai-samples#700) fails the run. This launcher, on the same
`aiplatform_v1` client and request types, tries the alternatives in order (the primary,
then `vertex.fallbacks`), skipping one whose quota is below its need, for at most
`vertex.capacity_rounds` rounds with `vertex.capacity_backoff` (doubled each round) between
them. Only a capacity failure of a job that never ran (no `start_time`: Vertex AI never
got its machines) moves on; any other failure, and any failure after the job ran (a Spot
preemption, which Vertex AI restarts itself, included), fails the step as it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from components.capacity import quotas
from components.capacity.alternatives import Alternative
from components.cloud_names import vertex_endpoint, vertex_resource_uri
from trainer.common.errors import StageError

#: What Vertex AI's stock-outs and quota refusals say (lower case); nothing else retries.
STOCK_OUT_MARKERS = ("resources are insufficient in region", "zone_resource_pool_exhausted",
                     "stockout")
QUOTA_MARKERS = ("exceed quota limits",)
#: How often a running job is looked at (gcpc's launchers poll every 20 s).
POLL_SECONDS = 20.0
FINAL_STATES = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
                "JOB_STATE_EXPIRED")


class TrainingJobError(StageError):
    """The training CustomJob failed for a reason no other configuration would avoid."""


class NoCapacityError(StageError):
    """Every configuration was out of capacity for every round."""


def capacity_reason(message: str) -> str:
    """`stock-out` or `quota` when Vertex AI's message says the job found no capacity;
    "" for any other failure."""
    text = message.lower()
    if any(marker in text for marker in QUOTA_MARKERS):
        return "quota"
    if any(marker in text for marker in STOCK_OUT_MARKERS):
        return "stock-out"
    return ""


@dataclasses.dataclass
class Attempt:
    """One try of one alternative: what happened and why."""

    label: str
    region: str
    outcome: str  # trained, stock-out, quota, skipped (quota below the need)
    reason: str = ""
    job: str = ""

    def describe(self) -> str:
        job = f" ({self.job})" if self.job else ""
        return f"{self.label} in {self.region}: {self.outcome}{job}" + \
            (f": {self.reason}" if self.reason else "")


@dataclasses.dataclass
class Launch:
    """What the launcher needs from the pipeline: the clients and how to make each
    alternative's CustomJob."""

    project: str
    make_job: Callable[[Alternative], Any]  # -> aiplatform_v1.CustomJob
    jobs_for: Callable[[str], Any]  # region -> JobServiceClient
    quota_check: Callable[[Alternative], str]  # why its quota is too small, or ""
    log: Callable[[str], None]
    rounds: int = 1
    backoff_seconds: float = 600.0
    poll_seconds: float = POLL_SECONDS
    sleep: Callable[[float], None] = time.sleep


@dataclasses.dataclass
class Result:
    """The alternative that trained, its finished job, and every attempt."""

    alternative: Alternative
    job: Any
    attempts: list[Attempt]

    def record(self) -> dict[str, Any]:
        """As the lineage, the run's report and the model's description keep it."""
        return {"trained_on": self.alternative.label, "index": self.alternative.index,
                "configuration": self.alternative.describe(),
                "attempts": [dataclasses.asdict(a) for a in self.attempts]}


def summary(record: Mapping[str, Any]) -> str:
    """A capacity record in one line: where it trained, and why not on the earlier ones."""
    if not record:
        return ""
    others = [a for a in record.get("attempts", []) if a["outcome"] != "trained"]
    text = f"trained on {record['trained_on']} ({record['configuration']})"
    if others:
        text += "; before it: " + "; ".join(
            f"{a['label']} in {a['region']} {a['outcome']}" for a in others)
    return text


def launch(alternatives: Sequence[Alternative], how: Launch) -> Result:
    """Runs the training CustomJob on the first alternative with capacity.

    Raises:
        TrainingJobError: A job failed (or was cancelled) for another reason than capacity,
            or after it ran.
        NoCapacityError: Every alternative was out of capacity in every round.
    """
    attempts: list[Attempt] = []
    for number in range(how.rounds):
        if number:
            wait = how.backoff_seconds * 2 ** (number - 1)
            how.log(f"capacity: every configuration was out of capacity; round {number + 1} "
                    f"of {how.rounds} in {wait:.0f} s")
            how.sleep(wait)
        for alternative in alternatives:
            short = how.quota_check(alternative)
            if short:
                attempts.append(Attempt(alternative.label, alternative.region, "skipped",
                                        short))
                how.log(f"capacity: {attempts[-1].describe()}")
                continue
            job, attempt = _try(alternative, how)
            attempts.append(attempt)
            how.log(f"capacity: {attempt.describe()}")
            if attempt.outcome == "trained":
                return Result(alternative, job, attempts)
    raise NoCapacityError(
        f"no configuration had capacity in {how.rounds} round(s); every attempt:\n"
        + "\n".join(f"  - {a.describe()}" for a in attempts)
        + "\nadd vertex.fallbacks in other regions or with other GPUs, use "
          "scheduling_strategy FLEX_START (the job waits for machines), or raise "
          "vertex.capacity_rounds")


def _try(alternative: Alternative, how: Launch) -> tuple[Any, Attempt]:
    """One alternative's CustomJob, created and followed to its end."""
    from google.api_core import exceptions

    client = how.jobs_for(alternative.region)
    parent = f"projects/{how.project}/locations/{alternative.region}"
    try:
        job = client.create_custom_job(parent=parent, custom_job=how.make_job(alternative))
    # 429: above a quota; gRPC raises ResourceExhausted, REST its base TooManyRequests.
    except exceptions.TooManyRequests as exc:
        # REST clients prefix the API's message with the request ("POST https://...: ").
        message = re.sub(r"^[A-Z]+ \S+: ", "", str(exc.message))
        return None, Attempt(alternative.label, alternative.region,
                             capacity_reason(message) or "quota", message)
    how.log(f"capacity: {alternative.label}: created {job.name} ({alternative.describe()})")
    with _cancelled_with_the_step(client, job.name):
        job = _follow(client, job.name, how)
    state = job.state.name
    if state == "JOB_STATE_SUCCEEDED":
        return job, Attempt(alternative.label, alternative.region, "trained", job=job.name)
    message = job.error.message or state
    reason = capacity_reason(message)
    ran = job.start_time is not None and job.start_time.timestamp() > 0
    if state == "JOB_STATE_FAILED" and reason and not ran:
        return job, Attempt(alternative.label, alternative.region, reason, message, job.name)
    why = " after it ran (Vertex AI's own restarts apply; not retried elsewhere)" \
        if reason and ran else ""
    raise TrainingJobError(f"the training CustomJob {job.name} ({alternative.label}) ended "
                           f"{state}{why}: {message}")


def _follow(client: Any, name: str, how: Launch) -> Any:
    """The job once it is in a final state."""
    while True:
        job = client.get_custom_job(name=name)
        if job.state.name in FINAL_STATES:
            return job
        how.sleep(how.poll_seconds)


@contextlib.contextmanager
def _cancelled_with_the_step(client: Any, name: str) -> Iterator[None]:
    """While a job runs, a SIGTERM to this step (a cancelled pipeline run) cancels it, as
    gcpc's launchers do (google_cloud_pipeline_components/container/utils/
    execution_context.py); nothing is left running."""
    def cancel(signum: int, frame: Any) -> None:
        client.cancel_custom_job(name=name)
        raise SystemExit(f"cancelled: the training CustomJob {name} was cancelled too")

    try:
        previous = signal.signal(signal.SIGTERM, cancel)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def gcp_resources(attempts: Sequence[Mapping[str, Any]]) -> str:
    """The jobs the attempts created, as gcpc's launchers write their `gcp_resources`
    output (Vertex AI Pipelines links each from the step)."""
    return json.dumps({"resources": [
        {"resourceType": "CustomJob", "resourceUri": vertex_resource_uri(a["region"], a["job"])}
        for a in attempts if a["job"]]})


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
        found = quotas.check(quotas.needs(alternative.worker_pool_specs, alternative.region,
                                          alternative.scheduling_strategy), infos)
        return "; ".join(q.describe(project) for q in found if q.refused)
    return check


def run_training_job(project: str, alternatives: Sequence[Mapping[str, Any]],
                     images: Mapping[str, Any], *, dataset_path: str, output_uri: str,
                     output_path: str, training: Mapping[str, Any], vertex: Mapping[str, Any],
                     log: Callable[[str], None]) -> Result:
    """Stage 4 on Vertex AI: stage 1's alternatives, each as a CustomJob of the trainer
    with its own training plan, tried in order until one trains (`launch`).

    Raises:
        TrainingJobError, NoCapacityError: As `launch`.
    """
    from components.training.vertex_job import custom_job, custom_job_spec, plan_flags
    from components.vertex_options import VertexOptions
    from trainer.common.schema import to_flags, validate
    from trainer.run.training_options import TrainingOptions

    options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
    flags = to_flags(validate(TrainingOptions, training, prefix="training", strict=False))
    # One display name for every attempt: the same run's training, wherever it ran.
    name = custom_job_spec(alternatives[0]["worker_pool_specs"], images,
                           dataset_path=dataset_path, output_uri=output_uri,
                           output_path=output_path, job_name=options.job_name)["display_name"]

    def make_job(alternative: Alternative) -> Any:
        spec = custom_job_spec(alternative.worker_pool_specs, images,
                               dataset_path=dataset_path, output_uri=output_uri,
                               output_path=output_path, job_name=options.job_name,
                               trainer_args=[*flags, *plan_flags(alternative.plan.to_dict())])
        return custom_job({**spec, "display_name": name}, options,
                          alternative.scheduling_strategy)

    clients: dict[str, Any] = {}

    def jobs_for(region: str) -> Any:
        if region not in clients:
            clients[region] = jobs_client(region)
        return clients[region]

    how = Launch(project, make_job, jobs_for,
                 quota_checker(quotas.quotas_client(), project, log), log,
                 rounds=options.capacity_rounds,
                 backoff_seconds=float(options.capacity_backoff.rstrip("s")),
                 poll_seconds=POLL_SECONDS)
    return launch([Alternative.from_dict(a) for a in alternatives], how)
