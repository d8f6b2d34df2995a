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
them. A job that never got its machines moves on: one that failed for capacity, one still
QUEUED or PENDING after `vertex.queue_limit` (cancelled first; never the last one tried,
which may as well wait, and never a FLEX_START job, which waits by design up to its own
`max_wait_duration`), and a FLEX_START job whose wait expired. Any other failure, and any
failure after the job ran (a Spot preemption, which Vertex AI restarts itself, included),
fails the step as it is.

As gcpc's launchers do for long jobs, it follows a job through the control plane's
passing errors (`components.capacity.following`), names every job in `gcp_resources` as
soon as it exists, labels it with the run's and the step's labels, and, when the step
runs again, follows the job an earlier run of it left instead of creating another
(`components.capacity.job_records`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from components.capacity.following import (
    FINAL_STATES,
    Watch,
    cancelled_with_the_step,
    follow,
)
from components.capacity.job_records import alternative_of, write_gcp_resources
from components.cloud_names import resource_region
from components.gpu.alternatives import Alternative
from trainer.common.errors import StageError

#: What Vertex AI's stock-outs and quota refusals say (lower case); nothing else retries.
STOCK_OUT_MARKERS = ("resources are insufficient in region", "zone_resource_pool_exhausted",
                     "stockout")
QUOTA_MARKERS = ("exceed quota limits",)
#: Outcomes of an attempt that found no capacity (the next alternative is tried).
NO_CAPACITY = ("stock-out", "quota", "queued", "expired", "skipped")


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
    """One try of one alternative: what happened and why.

    Attributes:
        outcome: trained, stock-out, quota, queued (cancelled after the queue limit),
            expired (FLEX_START's wait ran out), skipped (quota below the need), or
            failed (an earlier run's job that ended otherwise).
        resumed: The job was created by an earlier run of the step.
    """

    label: str
    region: str
    outcome: str
    reason: str = ""
    job: str = ""
    resumed: bool = False

    def describe(self) -> str:
        job = f" ({self.job}{', an earlier run of this step' if self.resumed else ''})" \
            if self.job else ""
        return f"{self.label} in {self.region}: {self.outcome}{job}" + \
            (f": {self.reason}" if self.reason else "")


@dataclasses.dataclass
class Launch:
    """What the launcher needs from the pipeline: the clients, how to make each
    alternative's CustomJob, and where it says what it created.

    Attributes:
        queue_limit_seconds: A STANDARD or SPOT job still QUEUED or PENDING this long after
            its creation is cancelled and the next alternative tried (0: no limit).
        find_earlier: The jobs an earlier run of this step created
            (`job_records.find_earlier`).
        gcp_resources_path: Where every created job is named as soon as it exists.
        watch: How jobs are followed (made from `log` when not given).
        guard_for: An alternative's question for its running job (why it must stop, or
            ""; `components.capacity.budget.running_guard`), or None.
        hold: Before the first job is created, the alternatives a budget leaves
            (`components.capacity.budget.hold`; it raises when none is left), or None. A
            step that finds jobs an earlier run of it created was held by that run.
    """

    project: str
    make_job: Callable[[Alternative], Any]  # -> aiplatform_v1.CustomJob
    jobs_for: Callable[[str], Any]  # region -> JobServiceClient
    quota_check: Callable[[Alternative], str]  # why its quota is too small, or ""
    log: Callable[[str], None]
    rounds: int = 1
    backoff_seconds: float = 600.0
    queue_limit_seconds: float = 0.0
    find_earlier: Callable[[], list[Any]] = list
    gcp_resources_path: str = ""
    watch: Watch | None = None
    guard_for: Callable[[Alternative], Callable[[Any], str]] | None = None
    hold: Callable[[Sequence[Alternative]], Sequence[Alternative]] | None = None

    def __post_init__(self) -> None:
        if self.watch is None:
            self.watch = Watch(self.log)


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
    resumed = any(a.get("resumed") and a["outcome"] == "trained"
                  for a in record.get("attempts", []))
    text = f"trained on {record['trained_on']} ({record['configuration']})" + \
        (", the job an earlier run of this step created" if resumed else "")
    if others:
        text += "; before it: " + "; ".join(
            f"{a['label']} in {a['region']} {a['outcome']}" for a in others)
    return text


class _Jobs:
    """The jobs this step created (or found), named in `gcp_resources` as they come."""

    def __init__(self, how: Launch):
        self.how = how
        self.named: list[tuple[str, str]] = []

    def add(self, region: str, name: str) -> None:
        if (region, name) not in self.named:
            self.named.append((region, name))
            write_gcp_resources(self.how.gcp_resources_path, self.named)


def launch(alternatives: Sequence[Alternative], how: Launch) -> Result:
    """Runs the training CustomJob on the first alternative with capacity, following
    instead the job an earlier run of the step left.

    Raises:
        TrainingJobError: A job failed (or was cancelled) for another reason than capacity,
            or after it ran.
        LostJobError: A job could not be looked at for too long (it was cancelled).
        NoCapacityError: Every alternative was out of capacity in every round.
        BudgetReachedError: A running job would have passed `vertex.budget_usd` (its
            `how.guard_for`); it was cancelled.
        BudgetError: No alternative fits `vertex.budget_usd` (`how.hold`); nothing was
            created.
    """
    attempts: list[Attempt] = []
    jobs = _Jobs(how)
    found = _resume(alternatives, how, attempts, jobs)
    if isinstance(found, Result):
        return found
    if how.hold is not None and not attempts:  # nothing created yet: held before any is
        alternatives = how.hold(alternatives)
    for number in range(how.rounds):
        if number:
            wait = how.backoff_seconds * 2 ** (number - 1)
            how.log(f"capacity: every configuration was out of capacity; round {number + 1} "
                    f"of {how.rounds} in {wait:.0f} s")
            how.watch.sleep(wait)
        for position, alternative in enumerate(alternatives):
            if number == 0 and position < found:
                continue  # an earlier run of the step tried it already
            short = how.quota_check(alternative)
            if short:
                attempts.append(Attempt(alternative.label, alternative.region, "skipped",
                                        short))
                how.log(f"capacity: {attempts[-1].describe()}")
                continue
            last = number == how.rounds - 1 and position == len(alternatives) - 1
            job, attempt = _try(alternative, how, jobs, last)
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


def _resume(alternatives: Sequence[Alternative], how: Launch, attempts: list[Attempt],
            jobs: _Jobs) -> Result | int:
    """The jobs an earlier run of this step created: a finished one that trained is the
    result; a live one is followed to its end; others are recorded. Returns the result,
    or the position of the first alternative the first round still has to try."""
    by_index = {a.index: a for a in alternatives}
    position = 0
    for job in how.find_earlier():
        index = alternative_of(job)
        region = resource_region(job.name)
        alternative = by_index.get(index) if index is not None else next(
            (a for a in alternatives if a.region == region), None)
        if alternative is None:
            how.log(f"capacity: {job.name} is not one of this run's configurations; left "
                    "alone")
            continue
        jobs.add(alternative.region, job.name)
        state = job.state.name
        try:
            if state in FINAL_STATES:
                job, attempt = _outcome(alternative, job, False, how, resumed=True)
            else:
                how.log(f"capacity: {job.name} ({alternative.label}), created by an earlier "
                        f"run of this step, is {state}: following it instead of creating "
                        "another")
                last = alternative.index == alternatives[-1].index
                job, attempt = _conclude(alternative, how.jobs_for(alternative.region),
                                         job.name, how, last, resumed=True)
        except TrainingJobError as exc:
            if state not in FINAL_STATES:
                raise
            attempt = Attempt(alternative.label, alternative.region, "failed", str(exc),
                              job.name, resumed=True)
        attempts.append(attempt)
        how.log(f"capacity: {attempt.describe()}")
        if attempt.outcome == "trained":
            return Result(alternative, job, attempts)
        if attempt.outcome in NO_CAPACITY:
            position = max(position, list(alternatives).index(alternative) + 1)
    return position


def _try(alternative: Alternative, how: Launch, jobs: _Jobs, last: bool
         ) -> tuple[Any, Attempt]:
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
    jobs.add(alternative.region, job.name)
    how.log(f"capacity: {alternative.label}: created {job.name} ({alternative.describe()})")
    return _conclude(alternative, client, job.name, how, last)


def _conclude(alternative: Alternative, client: Any, name: str, how: Launch, last: bool,
              resumed: bool = False) -> tuple[Any, Attempt]:
    """Follows a job to its end (cancelled with the step) and says what it came to."""
    # The last alternative of the last round waits: a queued job costs nothing and there
    # is nothing else to try. FLEX_START waits by design, up to its max_wait_duration.
    limit = 0.0 if last or alternative.scheduling_strategy == "FLEX_START" \
        else how.queue_limit_seconds
    guard = how.guard_for(alternative) if how.guard_for else None
    with cancelled_with_the_step(client, name):
        job, cancelled = follow(client, name, how.watch, limit, guard)
    if cancelled and cancelled != "queue" and job.state.name == "JOB_STATE_CANCELLED":
        from components.capacity.budget import BudgetReachedError

        stopped = Attempt(alternative.label, alternative.region, "budget", cancelled,
                          job.name, resumed)
        raise BudgetReachedError(
            f"{cancelled}: the training CustomJob {job.name} ({alternative.label}) was "
            "cancelled; its checkpoints stay in its job directory",
            result=Result(alternative, job, [stopped]))
    return _outcome(alternative, job, cancelled == "queue", how, resumed)


def _started(job: Any) -> bool:
    return job.start_time is not None and job.start_time.timestamp() > 0


def _outcome(alternative: Alternative, job: Any, queued_out: bool, how: Launch,
             resumed: bool = False) -> tuple[Any, Attempt]:
    """What a finished job came to: trained, or no capacity (the next alternative is
    tried).

    Raises:
        TrainingJobError: It failed otherwise, or after it ran.
    """
    state = job.state.name

    def attempt(outcome: str, reason: str = "") -> Attempt:
        return Attempt(alternative.label, alternative.region, outcome, reason, job.name,
                       resumed)

    if state == "JOB_STATE_SUCCEEDED":
        return job, attempt("trained")
    ran = _started(job)
    if queued_out and state == "JOB_STATE_CANCELLED" and not ran:
        return job, attempt("queued", f"no machines {how.queue_limit_seconds:.0f} s after "
                                      "it was created (vertex.queue_limit); cancelled")
    message = job.error.message or state
    if _expired(alternative, job, message, how.watch):
        return job, attempt("expired", message)
    reason = capacity_reason(message)
    if state == "JOB_STATE_FAILED" and reason and not ran:
        return job, attempt(reason, message)
    why = " after it ran (Vertex AI's own restarts apply; not retried elsewhere)" \
        if reason and ran else ""
    raise TrainingJobError(f"the training CustomJob {job.name} ({alternative.label}) ended "
                           f"{state}{why}: {message}")


def _expired(alternative: Alternative, job: Any, message: str, watch: Watch) -> bool:
    """Whether a job ended because its wait for machines ran out.

    Vertex AI documents JOB_STATE_EXPIRED ("the job's deadline passed") but not the state
    a FLEX_START job ends in when its `max_wait_duration` passes before it gets its
    machines ("Schedule training jobs based on resource availability" says only that the
    job then stops waiting); both EXPIRED and FAILED-before-it-started are taken as
    expiry, the latter when it failed for capacity or once its wait was spent.
    """
    state = job.state.name
    if state == "JOB_STATE_EXPIRED":
        return True
    if alternative.scheduling_strategy != "FLEX_START" or state != "JOB_STATE_FAILED" or \
            _started(job):
        return False
    limit = job.job_spec.scheduling.max_wait_duration
    seconds = limit.total_seconds() if limit else 0.0
    ended = job.end_time.timestamp() if job.end_time and job.end_time.timestamp() > 0 \
        else watch.clock()
    created = job.create_time.timestamp() if job.create_time else ended
    return bool(capacity_reason(message)) or (seconds > 0 and ended - created >= seconds)
