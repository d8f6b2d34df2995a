"""Following a training CustomJob for as long as it lasts: through the control plane's
passing errors, out of a queue that does not move, and cancelled with the step.

A job trains for hours and is looked at every 20 s; the generated JobServiceClient
retries nothing for `get_custom_job` by default, so one 503 or reset connection in those
hours would fail the step and leave the job training and billing with nobody waiting
for it. gcpc's CustomJob launcher retries api_core's transient errors for 600 s while
polling (`container/v1/custom_job/remote_runner.py`, `retry.Retry(deadline=600)`, and
ConnectionError in `gcp_launcher/job_remote_runner.py`); this follower does the same and,
since a GET changes nothing, also retries a gateway timeout, DEADLINE_EXCEEDED and a
request that timed out. When it must give up, it cancels the job and says so with the
job's console link: nothing is left billing unseen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from trainer.common.errors import StageError

#: How often a running job is looked at (gcpc's launchers poll every 20 s).
POLL_SECONDS = 20.0
#: The longest run of failed looks before giving up (gcpc's `_CUSTOM_JOB_RETRY_DEADLINE_
#: SECONDS`, 600 s), and the first wait between them (doubled up to `RETRY_MAX_DELAY`,
#: api_core's defaults: 1 s, x2, at most 60 s).
RETRY_BOUND_SECONDS = 600.0
RETRY_FIRST_DELAY = 1.0
RETRY_MAX_DELAY = 60.0
#: The longest one look may take before it counts as a passing error.
REQUEST_TIMEOUT = 60.0
FINAL_STATES = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
                "JOB_STATE_EXPIRED")
#: States of a job that has not got its machines yet.
WAITING_STATES = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING")


class LostJobError(StageError):
    """The job could not be looked at for longer than the bound; it was cancelled."""


def is_transient(error: BaseException) -> bool:
    """Whether a failed look at a job is worth another: api_core's transient errors
    (`retry.if_transient_error`: 500, 429, 503), a gateway timeout (504) or
    DEADLINE_EXCEEDED, and a connection that dropped or timed out (REST's requests
    errors, Python's own)."""
    import requests
    from google.api_core import exceptions

    return isinstance(error, (
        exceptions.InternalServerError, exceptions.TooManyRequests,
        exceptions.ServiceUnavailable, exceptions.GatewayTimeout,
        exceptions.DeadlineExceeded, requests.exceptions.ConnectionError,
        requests.exceptions.Timeout, ConnectionError, TimeoutError))


def console_link(name: str) -> str:
    """A CustomJob's page in the Google Cloud console, as aiplatform's own
    `_Job._dashboard_uri` writes it (`google/cloud/aiplatform/jobs.py`)."""
    parts = name.split("/")
    project, region, job = parts[1], parts[3], parts[-1]
    return (f"https://console.cloud.google.com/agent-platform/locations/{region}/training/"
            f"{job}?project={project}")


@dataclasses.dataclass
class Watch:
    """How a job is followed.

    Attributes:
        log: Where progress lines go.
        poll_seconds: Between two looks at a job.
        sleep: How to wait (tests pass their own).
        clock: Wall-clock seconds (compared with the job's `create_time`).
        retry_bound_seconds: The longest run of failed looks before giving up.
        retry_first_delay: The first wait after a failed look (then doubled).
        request_timeout: The longest one look may take.
    """

    log: Callable[[str], None]
    poll_seconds: float = POLL_SECONDS
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    retry_bound_seconds: float = RETRY_BOUND_SECONDS
    retry_first_delay: float = RETRY_FIRST_DELAY
    request_timeout: float = REQUEST_TIMEOUT


def look(client: Any, name: str, watch: Watch) -> Any:
    """The job as Vertex AI reports it now, through passing errors for up to
    `watch.retry_bound_seconds`.

    Raises:
        LostJobError: Every look failed for longer than the bound (the job is cancelled
            first, or the message says it could not be).
        Exception: A look failed for a reason that is not passing (e.g. 403, 404).
    """
    first_failure, delay = None, watch.retry_first_delay
    while True:
        try:
            return client.get_custom_job(name=name, timeout=watch.request_timeout)
        except Exception as exc:
            if not is_transient(exc):
                raise
            now = watch.clock()
            first_failure = now if first_failure is None else first_failure
            failing = now - first_failure
            if failing >= watch.retry_bound_seconds:
                raise LostJobError(
                    f"the training CustomJob {name} could not be looked at for "
                    f"{failing:.0f} s (last: {_short(exc)}); "
                    + cancel(client, name, watch) + f"; its page: {console_link(name)}"
                ) from None
            watch.log(f"training: looking at {name} failed ({_short(exc)}); again in "
                      f"{delay:g} s (giving up after {watch.retry_bound_seconds:.0f} s)")
            watch.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY)


def cancel(client: Any, name: str, watch: Watch) -> str:
    """Asks Vertex AI to cancel a job (through passing errors, for a short while); says
    what happened, in words that end a sentence."""
    delay, attempt = watch.retry_first_delay, 1
    while True:
        try:
            client.cancel_custom_job(name=name, timeout=watch.request_timeout)
            return "it was cancelled so that nothing trains or bills unseen"
        except Exception as exc:  # noqa: BLE001 - any failure is reported, not raised
            if not is_transient(exc) or attempt == 4:
                return (f"cancelling it failed too ({_short(exc)}): cancel it by hand, or "
                        "it trains and bills on with nobody waiting for it")
        watch.sleep(delay)
        delay, attempt = delay * 2, attempt + 1


def waited_seconds(job: Any, watch: Watch) -> float:
    """How long ago Vertex AI created the job (0 when it does not say)."""
    created = job.create_time.timestamp() if job.create_time else 0.0
    return max(0.0, watch.clock() - created) if created > 0 else 0.0


def follow(client: Any, name: str, watch: Watch, queue_limit: float = 0.0,
           guard: Callable[[Any], str] | None = None) -> tuple[Any, str]:
    """Looks at the job every `watch.poll_seconds` until it is in a final state.

    Args:
        client: A JobServiceClient of the job's region.
        name: The job's resource name.
        watch: How.
        queue_limit: With a positive value, a job still QUEUED or PENDING that many
            seconds after it was created is cancelled (and followed until Vertex AI
            says it ended).
        guard: Asked at every look at a RUNNING job why it must stop ("": it goes on;
            `components.capacity.budget.running_guard`); a reason cancels it.

    Returns:
        The job in its final state, and why this follower cancelled it: "queue" for the
        queue limit, the guard's reason, or "" when it did not.
    """
    cancelled = ""
    while True:
        job = look(client, name, watch)
        state = job.state.name
        if state in FINAL_STATES:
            return job, cancelled
        waited = waited_seconds(job, watch)
        if queue_limit > 0 and not cancelled and state in WAITING_STATES and \
                waited >= queue_limit:
            watch.log(f"capacity: {name} is still {state} {waited:.0f} s after it was "
                      f"created (vertex.queue_limit {queue_limit:.0f}s); "
                      + cancel(client, name, watch))
            cancelled = "queue"
        reason = guard(job) if guard and not cancelled and state == "JOB_STATE_RUNNING" \
            else ""
        if reason:
            watch.log(f"{reason}; {name}: " + cancel(client, name, watch))
            cancelled = reason
        watch.sleep(watch.poll_seconds)


@contextlib.contextmanager
def cancelled_with_the_step(client: Any, name: str) -> Iterator[None]:
    """While a job runs, a SIGTERM to this step (a cancelled pipeline run) cancels it, as
    gcpc's launchers do (google_cloud_pipeline_components/container/utils/
    execution_context.py); nothing is left running."""
    def on_term(signum: int, frame: Any) -> None:
        client.cancel_custom_job(name=name)
        raise SystemExit(f"cancelled: the training CustomJob {name} was cancelled too")

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text[:200]}"
