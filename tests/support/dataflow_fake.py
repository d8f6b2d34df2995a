"""A fake of the Dataflow REST API (v1b3) on loopback, for Beam's own DataflowRunner.

It records every request and, as Dataflow would, runs the job it was sent: the pipeline
proto Beam staged (`environment.sdkPipelineOptions`' `pipelineUrl`, on the Cloud Storage
emulator) is run by Beam's FnApiRunner in this process, with the SDK container's
environment replaced by the embedded one (no Docker here: the container would hold the same
code). A test may instead have the job fail with an error message, or keep running until it
is cancelled. It refuses what Dataflow refuses that the project could get wrong: a job name
outside Dataflow's form, or a job without a Cloud Storage temp location.
"""

from __future__ import annotations

import dataclasses
import http.server
import re
import threading
import time
from typing import Any

from tests.support.json_http import json_handler

#: Dataflow job names (Dataflow docs, "Pipeline options": `--job_name`).
JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclasses.dataclass
class FakeJob:
    """A job the fake holds: its request and its state."""

    id: str
    request: dict[str, Any]
    state: str = "JOB_STATE_PENDING"
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    started: float = dataclasses.field(default_factory=time.time)
    ended: float | None = None  # when the pipeline ran to its end (or failed)

    def times(self) -> dict[str, str]:
        """The job's times as Dataflow's Job has them (RFC 3339)."""
        return {"createTime": _rfc3339(self.started), "startTime": _rfc3339(self.started),
                "currentStateTime": _rfc3339(self.ended or time.time())}

    def metrics(self) -> list[dict[str, Any]]:
        """What the job used, as getMetrics reports it: one worker of the job's machine
        type for as long as it ran: the type's vCPUs (its last number), 4 GB of memory per
        vCPU (a standard type) and a 25 GB disk (Dataflow Shuffle's batch default)."""
        pools = self.request.get("environment", {}).get("workerPools") or [{}]
        vcpus = int(str(pools[0].get("machineType") or "n1-standard-1").rsplit("-", 1)[1])
        seconds = (self.ended or time.time()) - self.started
        totals = {"TotalVcpuTime": vcpus * seconds, "TotalMemoryUsage": vcpus * 4096 * seconds,
                  "TotalPdUsage": 25 * seconds, "TotalSsdUsage": 0,
                  "CurrentVcpuCount": vcpus}
        return [{"name": {"name": name, "origin": "dataflow/v1b3"}, "scalar": round(value)}
                for name, value in totals.items()]


def _rfc3339(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat() \
        .replace("+00:00", "Z")


class FakeDataflow:
    """The fake API; `outcome` decides how the next jobs end: `run` (the pipeline is
    run), `fail` (failed with `error`) or `hang` (running until cancelled)."""

    def __init__(self, outcome: str = "run", error: str = "Workflow failed."):
        self.outcome, self.error = outcome, error
        self.requests: list[tuple[str, str, Any]] = []
        self.jobs: dict[str, FakeJob] = {}
        self.run_error: BaseException | None = None
        self.require_cmek = False  # the org policy that refuses a job without a key
        self.metrics_denied = False  # getMetrics answers 403 (a role without metrics)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        # "localhost" in the endpoint makes Beam's client use the REST transport.
        return f"http://localhost:{self._server.server_address[1]}"

    def __enter__(self) -> FakeDataflow:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def created(self) -> list[dict[str, Any]]:
        """The bodies of the job creation requests, in order."""
        return [body for method, path, body in self.requests
                if method == "POST" and path.split("?")[0].endswith("/jobs")]

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        route = path.split("?")[0]
        match = re.fullmatch(r"/v1b3/projects/([^/]+)/locations/([^/]+)/jobs(?:/([^/]+))?"
                             r"(/messages|/metrics)?", route)
        if not match:
            return 404, {"error": {"code": 404, "message": f"no route {method} {route}"}}
        job_id, messages = match.group(3), match.group(4)
        if method == "POST" and job_id is None:
            return self._create(body)
        job = self.jobs.get(job_id or "")
        if job is None:
            return 404, {"error": {"code": 404, "message": f"job {job_id} not found"}}
        if messages == "/metrics" and self.metrics_denied:
            return 403, {"error": {"code": 403, "status": "PERMISSION_DENIED", "message": (
                "Permission 'dataflow.metrics.get' denied on resource")}}
        if messages == "/metrics":
            return 200, {"metricTime": job.times()["currentStateTime"],
                         "metrics": job.metrics()}
        if messages:
            return 200, {"jobMessages": job.messages}
        if method == "PUT":
            if body.get("requestedState") in ("JOB_STATE_CANCELLED", 5):
                job.state = "JOB_STATE_CANCELLED"
            return 200, {"id": job.id, "currentState": job.state}
        return 200, {"id": job.id, "name": job.request["name"], "currentState": job.state,
                     **job.times()}

    def _create(self, body: dict[str, Any]) -> tuple[int, Any]:
        problem = _job_problem(body)
        if problem:
            return 400, {"error": {"code": 400, "message": problem,
                                   "status": "INVALID_ARGUMENT"}}
        # Under constraints/gcp.restrictNonCmekServices a job needs its key
        # (Job.environment.serviceKmsKeyName, which Beam sets from --dataflow_kms_key).
        if self.require_cmek and not body.get("environment", {}).get("serviceKmsKeyName"):
            project = body.get("projectId", "PROJECT")
            return 400, {"error": {"code": 400, "status": "FAILED_PRECONDITION", "message": (
                f"Constraint `constraints/gcp.restrictNonCmekServices` violated for "
                f"`projects/{project}` attempting to create a resource without specifying "
                "a KMS CryptoKey.")}}
        job = FakeJob(f"2026-job-{len(self.jobs) + 1}", body)
        self.jobs[job.id] = job
        if self.outcome == "run":
            job.state = "JOB_STATE_RUNNING"
            threading.Thread(target=self._run, args=(job,), daemon=True).start()
        elif self.outcome == "fail":
            job.state = "JOB_STATE_FAILED"
            job.messages.append({"id": "1", "time": "2026-11-24T00:00:00Z",
                                 "messageText": self.error,
                                 "messageImportance": "JOB_MESSAGE_ERROR"})
        else:
            job.state = "JOB_STATE_RUNNING"
        return 200, {**body, "id": job.id, "currentState": job.state}

    def _run(self, job: FakeJob) -> None:
        """Runs the staged pipeline as the workers would."""
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.portability.api import beam_runner_api_pb2
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        from google.cloud import storage

        try:
            url = _pipeline_url(job.request)
            bucket, _, name = url[len("gs://"):].partition("/")
            client = storage.Client.create_anonymous_client()
            proto = beam_runner_api_pb2.Pipeline.FromString(
                client.bucket(bucket).blob(name).download_as_bytes())
            for environment in proto.components.environments.values():
                environment.urn = "beam:env:embedded_python:v1"
                environment.payload = b""
            FnApiRunner().run_via_runner_api(proto, PipelineOptions([]))
            job.ended = time.time()
            job.state = "JOB_STATE_DONE"
        except Exception as exc:  # noqa: BLE001 - the test reads it; the job fails as on Dataflow
            self.run_error = exc
            job.messages.append({"id": "1", "time": "2026-11-24T00:00:00Z",
                                 "messageText": f"Traceback: {exc}",
                                 "messageImportance": "JOB_MESSAGE_ERROR"})
            job.ended = time.time()
            job.state = "JOB_STATE_FAILED"

    def _handler(self) -> type:
        return json_handler(lambda request, method, body: self._route(method, request.path,
                                                                      body))


def _pipeline_url(request: dict[str, Any]) -> str:
    options = request["environment"]["sdkPipelineOptions"]
    return options["options"]["pipelineUrl"]


def _job_problem(body: dict[str, Any]) -> str | None:
    """Why Dataflow would refuse the job, or None."""
    if not JOB_NAME.match(body.get("name", "")):
        return (f"(job name) The job name {body.get('name')!r} is invalid: it must match "
                "[a-z]([-a-z0-9]{0,1022}[a-z0-9])?")
    environment = body.get("environment", {})
    if not environment.get("tempStoragePrefix", "").startswith("storage.googleapis.com/"):
        return "a temp location on Cloud Storage is required"
    return None
