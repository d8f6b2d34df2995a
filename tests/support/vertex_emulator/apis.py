"""A fake of the Google REST APIs a Vertex AI run calls, on 127.0.0.1, recording requests.

Vertex AI: `customJobs` create/get/cancel, `models:upload` with its operation, `models`
get (the default version: a model's first version, then the last uploaded with the
`default` alias, or the one `mergeVersionAliases` gave it; Vertex AI docs: "How to use
model version aliases"), endpoints and Cloud Monitoring's time series
(`tests.support.vertex_emulator.endpoints`, with their rules); Cloud
Build: `builds` create and the build's operation, which stays "not done" for
`build_seconds` (a client that gives up early fails) and then "pushes" each image to the
fake Artifact Registry; each step's `docker build` is recorded with what the builder of
`gcr.io/cloud-builders/docker` would run for it (`built`): without BuildKit, every `RUN`
of every stage of the Dockerfile it names, whatever its `--target` (Docker docs:
"Multi-stage builds"; docker/docs#15477); Artifact Registry: `tags` get; Resource
Manager: `projects` get (project number `PROJECT_NUMBER`, which aiplatform's
`PipelineJob.submit` compares with the pipeline root bucket's owner); `testIamPermissions`
of Resource Manager (projects), Artifact Registry (repositories), Cloud Storage (buckets)
and IAM (service accounts), granting all but `denied`, or with `grants` what was granted
on the resource or above it.

What Vertex AI and Cloud Build refuse, the fake refuses with their status (400
INVALID_ARGUMENT): a CustomJob whose GPU type its region does not offer (by the zone data
the project reads, for the regions and types it records), an image reference with both a
tag and a digest (`Invalid image URI`:
kubeflow/pipelines#8490, googleapis/python-aiplatform#1861), in a CustomJob's pools or a
model's container, and, through `image_problem`, in a pipeline's executors; a Cloud Build
location that is neither a region nor `global` (Cloud Build docs: "Cloud Build
locations"; Artifact Registry's multi-regions `us`, `europe`, `asia` are not among them).

A CustomJob starts every replica of its worker pools as a local process with the
container's command (or the image's entry point, as its Dockerfile declares it:
`image_entrypoints`) and arguments and the environment Vertex AI sets (Vertex AI docs:
"Distributed training"; CustomJobSpec.baseOutputDirectory). This machine has no GPUs:
a replica's `--expected-gpus N` (its pool's GPUs, which the trainer checks) is recorded
and left out of the command, as a machine with all N visible would pass the check; its
`--training-plan` is recorded as sent, and the replica runs it with what only GPUs can do
turned off (NCCL becomes TensorFlow's ring, no XLA, no mixed precision), as CPUs would
refuse or crawl through it.

- `TF_CONFIG`: `cluster` with `chief` (pool 0), `worker` (pool 1) and `ps` (pool 2) only;
  `task` with the replica's type (`evaluator` for pool 3) and index; `job`, `environment:
  cloud`. Not set for a job of a single replica.
- `CLUSTER_SPEC`: the pools as `workerpool0..3`, and this replica's pool and index.
- `AIP_MODEL_DIR`, `AIP_CHECKPOINT_DIR`, `AIP_TENSORBOARD_LOG_DIR`: `<base>/model/`,
  `<base>/checkpoints/`, `<base>/logs/`, as `gs://` URIs with a trailing slash.

The job succeeds when every replica of pools 0 and 1 has exited with 0 (parameter
servers and evaluators are then stopped) and fails when any replica fails.

What long jobs meet on Vertex AI, on request: `get_faults` makes the next GETs of a
CustomJob fail as the control plane's passing errors do (`"503"`, `"500"`, `"504"`: the
status; `"timeout"`: the answer comes after `fault_delay` s; `"drop"`: the connection is
closed without an answer); `queued` holds a job whose machine or GPU type is listed for
its region in JOB_STATE_QUEUED, its replicas not started (until the entry is removed,
when it starts), until it is cancelled or, for
a FLEX_START job, its `maxWaitDuration` passes: it then ends as `flex_expiry` says
(`"EXPIRED"`, or `"FAILED"` before it started; which of the two Vertex AI uses is not
documented). ListCustomJobs reads `labels.KEY="VALUE"` terms of its filter besides
`state="..."` ones.

A HyperparameterTuningJob (`hyperparameterTuningJobs` create/get/cancel, and list by its
filter's `labels.KEY="VALUE"` terms) runs its trials,
`parallelTrialCount` at a time, each as a CustomJob of its `trialJobSpec` with the trial's
parameters appended as `--<parameterId> <value>` (Vertex AI docs: "Create a
hyperparameter tuning job"), its base output directory `<job's>/<trial id>/`, and
`CLOUD_ML_TRIAL_ID` and a metrics file of its own (`CLOUD_ML_HP_METRIC_FILE`, what
cloudml-hypertune writes); the trial's final measurement is the last value reported for
the study's metric, and a trial that fails or reports none is INFEASIBLE. The values are
drawn at random within each parameter's spec (this fake does not optimise). It refuses
what the StudySpec forbids: a parameter without exactly one value spec, a log scale
whose minimum is not positive, a minimum above its maximum, discrete values not
increasing, grid search with a DOUBLE parameter, and tag+digest image references.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.json_http import DropConnection, json_handler
from tests.support.vertex_emulator.bucket_regions import bucket_refusal
from tests.support.vertex_emulator.reservations import ReservationService, affinity_refusal

ROLES = ("chief", "worker", "ps", "evaluator")

#: What Beam's boot program does when a container is started without Dataflow's worker
#: harness flags (`--id`, `--logging_endpoint`, ...): it exits at once (apache/beam,
#: sdks/python/container/boot.go).
BEAM_BOOT_ALONE = [sys.executable, "-c",
                   "import sys; sys.exit('boot: No id provided.')"]


#: The GPU benchmark's module (`pipelines.vertex.benchmark_job.BENCHMARK_COMMAND`).
BENCHMARK_MODULE = "trainer.benchmark"


def image_entrypoints(repository: str, root: Path) -> dict[str, list[str]]:
    """Each project image's entry point as its Dockerfile under `root` declares it, as this
    machine runs it: `python` is this interpreter, Beam's boot program exits as it does
    without a Dataflow harness (a pool that relies on the CPU image's entry point fails as
    it would on Vertex AI)."""
    from components import images
    from release.image_check import stage_entrypoint

    found = {}
    for image in images.PROJECT_IMAGES:
        command = stage_entrypoint((root / image.dockerfile).read_text())
        if command[:1] == ["python"]:
            command = [sys.executable, *command[1:]]
        elif command[:1] == ["/opt/apache/beam/boot"]:
            command = list(BEAM_BOOT_ALONE)
        found[f"{repository}/{image.name}"] = command
    return found


@dataclasses.dataclass
class Recorded:
    """One request: method, path, the host the client meant, the JSON body, the routing
    header (`x-goog-request-params`) and the query's parameters."""

    method: str
    path: str
    host: str
    body: Any
    routing: str = ""
    query: dict[str, list[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Replica:
    pool: int
    index: int
    env: dict[str, str]
    process: subprocess.Popen
    log: Path
    expected_gpus: int = 0
    training_plan: dict[str, Any] | None = None


@dataclasses.dataclass
class CustomJob:
    name: str
    resource: dict[str, Any]
    replicas: list[Replica]
    state: str = "JOB_STATE_RUNNING"
    error: str = ""
    error_code: int = 13
    created: float = dataclasses.field(default_factory=time.time)
    stopping: threading.Thread | None = None  # its cancellation, while its replicas stop

    def settled(self, timeout: float = 60.0) -> str:
        """Its state once a cancellation under way has ended (event-based: the thread
        stopping its replicas is joined)."""
        if self.stopping is not None:
            self.stopping.join(timeout)
        return self.state


#: The emulated project's number (Resource Manager's answer, the buckets' owner).
PROJECT_NUMBER = "123456789012"


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class FakeGoogleApis:
    """The fake APIs; `url` is where the emulated processes' requests are sent.

    Args:
        work_dir: Where replica logs go.
        entrypoints: Image name (without tag or digest) -> the command its container runs.
        environment: Environment of every replica (the emulation's own, e.g. the stand-in
            mount and the Cloud Storage emulator); may be set after construction.
        checkout: Where the Dockerfiles that builds name are read (the build context's).
    """

    def __init__(self, work_dir: Path, entrypoints: dict[str, list[str]],
                 environment: dict[str, str] | None = None, checkout: Path | None = None):
        self.work_dir = work_dir
        self.checkout = checkout
        self.built: dict[str, list[str]] = {}  # build step id -> the RUNs its builder ran
        self.entrypoints = entrypoints
        self.environment = environment or {}
        self.requests: list[Recorded] = []
        self.jobs: dict[str, CustomJob] = {}
        self.tags: dict[str, str] = {}  # Artifact Registry tag name -> version name
        self.models: list[dict[str, Any]] = []
        self.defaults: dict[str, str] = {}  # model -> its default version
        self.builds: dict[str, dict[str, Any]] = {}  # operation name -> build, started
        self.build_seconds = 1.5  # how long a build stays "not done"
        # Cloud Build private pools: name -> WorkerPool resource (`closed_pool` makes one
        # without public egress, whose builds fail reading anything from the internet).
        self.worker_pools: dict[str, dict[str, Any]] = {}
        # Vertex AI persistent resources: name -> PersistentResource (as a user made them).
        self.persistent_resources: dict[str, dict[str, Any]] = {}
        # The emulated runs (`EmulatedPipelines(published=...)`), for GetPipelineJob.
        self.pipeline_jobs: dict[str, Any] = {}
        self.denied: set[str] = set()  # permissions testIamPermissions leaves out
        # resource -> permissions granted there; None: everything (but `denied`) everywhere
        self.grants: dict[str, set[str]] | None = None
        self.tuning_jobs: dict[str, dict[str, Any]] = {}  # name -> the job resource
        # The org policy constraints/gcp.restrictNonCmekServices: every create without
        # a customer-managed key is refused (`cmek_refusal`).
        self.require_cmek = False
        # A bucket's location as Cloud Storage reports it (None: unknown); when given, a
        # create whose bucket is outside its region is refused (`bucket_refusal`).
        self.bucket_location: Callable[[str], str | None] | None = None
        # Cloud KMS: a key's own IAM bindings (getIamPolicy); a key absent here answers 403.
        self.key_policies: dict[str, list[dict[str, Any]]] = {}
        # Custom-training quota metric (without the service) -> region -> limit; a metric
        # absent here is a quota the project does not have (never refused).
        self.quotas: dict[str, dict[str, int]] = {}
        # (machine type or GPU type, region) with no machines right now: a job using one
        # fails without starting, as Vertex AI's stock-outs do.
        self.stockouts: set[tuple[str, str]] = set()
        # (machine type or GPU type, region) whose jobs wait in QUEUED (see the docstring).
        self.queued: set[tuple[str, str]] = set()
        self.flex_expiry = "EXPIRED"
        self.get_faults: list[str] = []  # the next CustomJob GETs' faults, in order
        # What every replica runs instead of its container's command and args (None: its
        # own), e.g. ["true"]: a container that ends at once, having written nothing.
        self.replica_command: list[str] | None = None
        self.fault_delay = 3.0
        # Seconds a CustomJob's machines ran before its containers started (provisioning,
        # image pulls): Vertex AI's startTime is when the job first entered RUNNING, and
        # the start-up is billed; here its startTime is set that far back.
        self.start_up_seconds = 0.0
        self._catalog: Any = None  # the Cloud Billing Catalog API, made when first asked
        from tests.support.vertex_emulator.endpoints import EndpointService

        self.endpoints = EndpointService(self.models)  # and Cloud Monitoring's series
        self.endpoints.training_jobs = self.jobs
        self.endpoints.request_host = lambda: getattr(self._request, "host", "")
        from tests.support.vertex_emulator.batch import BatchPredictionService

        self.batch = BatchPredictionService(self.models, self.endpoints.predictor)
        from tests.support.vertex_emulator.metadata import MetadataService

        self.metadata = MetadataService()  # Vertex ML Metadata and TensorBoard
        self.compute = ReservationService()  # Compute Engine's reservations
        self.monitoring_address = ""  # gRPC, once started (`start_monitoring`)
        self._lock = threading.Lock()
        self._request = threading.local()  # the query string of the request being served
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    @property
    def catalog(self) -> Any:
        """The fake Cloud Billing Catalog API (`tests.support.billing_catalog`): the prices
        the run's estimates read."""
        if self._catalog is None:
            from tests.support.billing_catalog import FakeCatalog

            self._catalog = FakeCatalog()
        return self._catalog

    def __enter__(self) -> FakeGoogleApis:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self.endpoints.stop()
        for job in self.tuning_jobs.values():
            job["cancelled"] = True
        for job in self.jobs.values():
            for replica in job.replicas:
                if replica.process.poll() is None:
                    replica.process.kill()
                    replica.process.wait()

    def start_monitoring(self) -> str:
        """Cloud Monitoring's ListTimeSeries on gRPC (recorded as GET .../timeSeries)."""
        def record(name: str, query: dict[str, Any]) -> None:
            self.requests.append(Recorded("GET", f"/v3/{name}/timeSeries",
                                          "monitoring.googleapis.com", None, "", query))

        self.monitoring_address = self.endpoints.start_monitoring(record)
        return self.monitoring_address

    def recorded(self, pattern: str, method: str = "POST") -> list[Recorded]:
        """The requests whose path matches `pattern`."""
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # --- Routes -------------------------------------------------------------------------

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if path.startswith("/v1/services/"):  # the Cloud Billing Catalog API
            return self.catalog.answer(method, path)
        path = path.split("?", 1)[0]
        refused = self.require_cmek and method == "POST" and cmek_refusal(path, body)
        refused = refused or (self.bucket_location is not None and method == "POST"
                              and bucket_refusal(path, body, self.bucket_location))
        if refused:
            return 400, _error(400, refused, "FAILED_PRECONDITION")
        routes = [
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+)/customJobs$", self._create_job),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/[^/:]+)$", self._get_job),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+)/customJobs$", self._list_jobs),
            ("GET", r"^/v1/(projects/[^/]+/locations/global/services/[^/]+)/quotaInfos$",
             self._quota_infos),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/[^/:]+):cancel$",
             self._cancel_job),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+)/hyperparameterTuningJobs$",
             self._create_tuning_job),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/hyperparameterTuningJobs/[^/:]+)$",
             self._get_tuning_job),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+)/hyperparameterTuningJobs$",
             self._list_tuning_jobs),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+/hyperparameterTuningJobs/[^/:]+)"
                     r":cancel$", self._cancel_tuning_job),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+)/models:upload$", self._upload),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/models/[^/]+/operations/[^/]+)$",
             self._operation),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/models/[^/:]+)$", self._get_model),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+)/models$", self._list_models),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/models/[^/:]+):listVersions$",
             self._list_versions),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+/models/[^/:]+)"
                     r":mergeVersionAliases$",
             self._merge_aliases),
            ("POST", r"^/v1/(projects/[^/]+(?:/locations/[^/]+)?)/builds$", self._build),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/operations/build-[^/]+)$",
             self._build_operation),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/workerPools/[^/:]+)$",
             self._worker_pool),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/persistentResources/[^/:]+)$",
             self._persistent_resource),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/pipelineJobs/[^/:]+)$",
             self._get_pipeline_job),
            ("GET", r"^/v3/projects/([^/:]+)$", self._get_project),
            ("POST", r"^/v3/(projects/[^/:]+):testIamPermissions$", self._test_permissions),
            ("POST", r"^/v1/(projects/-/serviceAccounts/[^/:]+):testIamPermissions$",
             self._test_permissions),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+/repositories/[^/:]+)"
                     r":testIamPermissions$", self._test_permissions),
            ("GET", r"^/storage/v1/b/([^/]+)/iam/testPermissions$", self._test_bucket),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/:]+)"
                     r":getIamPolicy$", self._key_policy),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/repositories/[^/]+/packages/[^/]+"
                    r"/tags/[^/]+)$", self._get_tag),
        ]
        for verb, pattern, handler in routes:
            match = re.match(pattern, path)
            if verb == method and match:
                return handler(match.group(1), body)
        for verb, pattern, handler in (self.endpoints.routes() + self.batch.routes()
                                       + self.metadata.routes() + self.compute.routes()):
            match = re.match(pattern, path)
            if verb == method and match:
                return handler(match.group(1), body, self._request.query)
        return 404, _error(404, f"no such method: {method} {path}")

    def _create_job(self, parent: str, body: dict[str, Any]) -> tuple[int, Any]:
        for pool in body.get("jobSpec", {}).get("workerPoolSpecs", []):
            image = (pool or {}).get("containerSpec", {}).get("imageUri", "")
            problem = image and _reference_problem(image)
            if problem:
                return 400, _error(400, problem)
        refused = affinity_refusal(body.get("jobSpec", {}))
        if refused:
            return 400, _error(400, refused)
        region = parent.rsplit("/", 1)[-1]
        missing = self._not_offered(region, body.get("jobSpec", {}))
        if missing:
            return 400, _error(400, f"Accelerator type {missing} is not supported in region "
                                    f"{region} (emulated wording)")
        board = re.match(r"projects/[^/]+/locations/([^/]+)/",
                         str(body.get("jobSpec", {}).get("tensorboard") or ""))
        if board and board.group(1) != region:
            # Vertex AI uses a resource in its own location only ("Vertex AI locations";
            # GoogleCloudPlatform/vertex-ai-samples#925).
            return 400, _error(400, f"Tensorboard {body['jobSpec']['tensorboard']} is not in "
                                    f"the job's location {region} (emulated wording)")
        over = self._over_quota(region, body.get("jobSpec", {}))
        if over:  # Vertex AI refuses the request (GoogleCloudPlatform/stable-diffusion-on-gcp#12)
            return 429, _error(429, "The following quota metrics exceed quota limits: "
                                    + ", ".join(over))
        with self._lock:
            name = f"{parent}/customJobs/{len(self.jobs) + 1}"
            resource = {**body, "name": name, "state": "JOB_STATE_PENDING",
                        "createTime": _now()}
            job = CustomJob(name, resource, [])
            self.jobs[name] = job
        if self._stocked_out(region, body.get("jobSpec", {})):
            # Created, then failed without ever running (openreview/openreview-expertise#401).
            job.state, job.error_code = "JOB_STATE_FAILED", 8
            job.error = (f"Resources are insufficient in region: {region}. Please try a "
                         "different region. If you use K80, please consider using P100 or "
                         "V100 instead.")
            return 200, resource
        if self._stocked_out(region, body.get("jobSpec", {}), self.queued):
            job.state = "JOB_STATE_QUEUED"
            return 200, {**resource, "state": job.state}
        try:
            job.replicas = self._start_replicas(job)
            job.resource["startTime"] = _now()
        except LookupError as missing:
            job.state, job.error = "JOB_STATE_FAILED", str(missing)
        return 200, {**resource, "state": job.state}

    def _stocked_out(self, region: str, spec: dict[str, Any],
                     wanting: set[tuple[str, str]] | None = None) -> bool:
        machines = {value for pool in map(aiplatform_pool, spec.get("workerPoolSpecs", []))
                    if pool for value in pool["machine_spec"].values()}
        wanting = self.stockouts if wanting is None else wanting
        return any((value, region) in wanting for value in machines)

    @staticmethod
    def _not_offered(region: str, spec: dict[str, Any]) -> str:
        """A GPU type of the job that the region does not offer, by the zone data the
        project reads (`components.gpu.accelerator_zones` for the GPU guide's types,
        `components.gpu.optimized_zones` for the accelerator-optimized ones); "" if
        none."""
        from components.gpu.regions import offered_zones, regions_offering

        zones = offered_zones(region)
        for pool in map(aiplatform_pool, spec.get("workerPoolSpecs", [])):
            gpu = pool.get("machine_spec", {}).get("accelerator_type") if pool else ""
            if gpu and regions_offering(gpu) is not None and \
                    not any(gpu in offered for offered in zones.values()):
                return gpu
        return ""

    def _over_quota(self, region: str, spec: dict[str, Any]) -> list[str]:
        """The quota metrics a new job in `region` would take above their limits, counting
        what the region's active jobs hold."""
        from components.capacity import quotas
        from components.gpu.worker_pool import parse_pools

        def needs(job_spec: dict[str, Any]) -> dict[str, int]:
            pools = parse_pools(map(aiplatform_pool, job_spec.get("workerPoolSpecs", [])))
            strategy = enum_name("strategy", job_spec.get("scheduling", {}).get("strategy")) \
                or "STANDARD"
            return {n.metric: n.amount for n in quotas.needs(pools, region, strategy)}

        held: dict[str, int] = {}
        for job in self.jobs.values():
            if job.name.split("/customJobs/")[0].endswith(f"/{region}") and \
                    job.state in quotas.ACTIVE_STATES:
                for key, amount in needs(job.resource.get("jobSpec", {})).items():
                    held[key] = held.get(key, 0) + amount
        over = []
        for key, amount in needs(spec).items():
            limit = self.quotas.get(key.rsplit("/", 1)[-1], {}).get(region)
            if limit is not None and held.get(key, 0) + amount > limit:
                over.append(key)
        return over

    def _list_jobs(self, parent: str, body: Any) -> tuple[int, Any]:
        """ListCustomJobs of a region; only the `state="..." OR ...` filter is read."""
        text = self._request.query.get("filter", [""])[0]
        wanted = re.findall(r'state="([A-Z_]+)"', text)
        labels = dict(re.findall(r'labels\.([a-z0-9_-]+)="([^"]*)"', text))
        found = []
        for job in list(self.jobs.values()):
            self._update(job)
            held = job.resource.get("labels") or {}
            if job.name.startswith(f"{parent}/") and (not wanted or job.state in wanted) \
                    and all(held.get(k) == v for k, v in labels.items()):
                found.append(self._resource(job))
        return 200, {"customJobs": found}

    def _quota_infos(self, parent: str, body: Any) -> tuple[int, Any]:
        """ListQuotaInfos: each quota of `quotas` with its value per region."""
        service = parent.rsplit("/", 1)[-1]
        infos = []
        for short_name, limits in sorted(self.quotas.items()):
            quota_id = "".join(part.title() for part in short_name.split("_")) + \
                "PerProjectPerRegion"
            infos.append({
                "name": f"{parent}/quotaInfos/{quota_id}", "quotaId": quota_id,
                "metric": f"{service}/{short_name}", "service": service,
                "dimensions": ["region"], "containerType": "PROJECT",
                "dimensionsInfos": [{"dimensions": {"region": region},
                                     "details": {"value": str(value)},
                                     "applicableLocations": [region]}
                                    for region, value in sorted(limits.items())]})
        return 200, {"quotaInfos": infos}

    def _get_job(self, name: str, body: Any) -> tuple[int, Any]:
        job = self.jobs.get(name)
        if job is None:
            step = next((found for run in list(self.pipeline_jobs.values())
                         for found in [run.step_job(name)] if found), None)
            return (200, step) if step else (404, _error(404, f"{name} not found"))
        with self._lock:
            fault = self.get_faults.pop(0) if self.get_faults else ""
        if fault == "drop":
            raise DropConnection
        if fault == "timeout":
            time.sleep(self.fault_delay)
        elif fault:
            return int(fault), _error(int(fault), f"emulated {fault}")
        self._update(job)
        return 200, self._resource(job)

    @staticmethod
    def _resource(job: CustomJob) -> dict[str, Any]:
        resource = {**job.resource, "state": job.state}
        if job.error:
            resource["error"] = {"code": job.error_code, "message": job.error}
        return resource

    def _cancel_job(self, name: str, body: Any) -> tuple[int, Any]:
        """CancelCustomJob starts an asynchronous cancellation (Vertex AI's reference: "the
        server makes a best effort to cancel the job"): the answer comes at once, the job is
        CANCELLING while its replicas stop, then CANCELLED."""
        job = self.jobs[name]
        if job.state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_EXPIRED",
                         "JOB_STATE_CANCELLED"):
            return 200, {}
        job.state = "JOB_STATE_CANCELLING"

        def stop() -> None:
            self._stop(job.replicas)
            job.state = "JOB_STATE_CANCELLED"
            job.resource["endTime"] = _now()

        job.stopping = threading.Thread(target=stop, daemon=True)
        job.stopping.start()
        return 200, {}

    # --- Hyperparameter tuning ------------------------------------------------------------

    def _create_tuning_job(self, parent: str, body: dict[str, Any]) -> tuple[int, Any]:
        problem = _study_problem(body.get("studySpec") or {}) or next(
            (p for pool in body.get("trialJobSpec", {}).get("workerPoolSpecs", [])
             for p in [_reference_problem((pool or {}).get("containerSpec", {})
                                          .get("imageUri", "") or "x")] if p), None)
        if problem:
            return 400, _error(400, problem)
        with self._lock:
            name = f"{parent}/hyperparameterTuningJobs/{len(self.tuning_jobs) + 1}"
            job = {**body, "name": name, "state": "JOB_STATE_RUNNING", "trials": [],
                   "createTime": _now()}
            self.tuning_jobs[name] = job
        threading.Thread(target=self._run_trials, args=(job, parent), daemon=True).start()
        return 200, job

    def _get_tuning_job(self, name: str, body: Any) -> tuple[int, Any]:
        job = self.tuning_jobs.get(name)
        if job is None:
            return 404, _error(404, f"{name} not found")
        with self._lock:
            return 200, json.loads(json.dumps(job))

    def _list_tuning_jobs(self, parent: str, body: Any) -> tuple[int, Any]:
        """ListHyperparameterTuningJobs of a region: its filter's `labels.KEY="VALUE"`
        terms are read."""
        text = self._request.query.get("filter", [""])[0]
        wanted = dict(re.findall(r'labels\.([a-z0-9_-]+)="([^"]*)"', text))
        with self._lock:
            found = [job for name, job in self.tuning_jobs.items()
                     if name.startswith(f"{parent}/")
                     and all((job.get("labels") or {}).get(k) == v for k, v in wanted.items())]
            return 200, {"hyperparameterTuningJobs": json.loads(json.dumps(found))}

    def _cancel_tuning_job(self, name: str, body: Any) -> tuple[int, Any]:
        self.tuning_jobs[name]["cancelled"] = True
        return 200, {}

    def _run_trials(self, job: dict[str, Any], parent: str) -> None:
        spec = job["studySpec"]
        metric = spec["metrics"][0]["metricId"]
        total, parallel = int(job["maxTrialCount"]), int(job.get("parallelTrialCount") or 1)
        failures_allowed = int(job.get("maxFailedTrialCount") or 0) or total
        base = job["trialJobSpec"].get("baseOutputDirectory", {}).get(
            "outputUriPrefix", "").rstrip("/")
        number = 0
        while number < total and not job.get("cancelled"):
            batch = []
            for _ in range(min(parallel, total - number)):
                number += 1
                batch.append(self._start_trial(job, parent, number, spec, base))
            for trial, custom_job, metrics_file in batch:
                while custom_job.state == "JOB_STATE_RUNNING":
                    self._update(custom_job)
                    time.sleep(0.2)
                value = _measurement(metrics_file, metric, spec)
                with self._lock:
                    trial["endTime"] = _now()
                    if custom_job.state == "JOB_STATE_SUCCEEDED" and value is not None:
                        trial["state"] = "SUCCEEDED"
                        trial["finalMeasurement"] = {"metrics": [{"metricId": metric,
                                                                  "value": value}]}
                    else:
                        trial["state"] = "INFEASIBLE"
                        trial["infeasibleReason"] = custom_job.error[-300:] or \
                            f"reported no {metric}"
            failed = sum(t["state"] == "INFEASIBLE" for t in job["trials"])
            if failed >= failures_allowed:
                break
        with self._lock:
            failed = sum(t["state"] == "INFEASIBLE" for t in job["trials"])
            job["state"] = "JOB_STATE_CANCELLED" if job.get("cancelled") else \
                "JOB_STATE_FAILED" if failed >= failures_allowed or failed == len(job["trials"]) \
                else "JOB_STATE_SUCCEEDED"
            if job["state"] == "JOB_STATE_FAILED":
                job["error"] = {"code": 9, "message": f"{failed} trial(s) failed"}
            job["endTime"] = _now()

    def _start_trial(self, job: dict[str, Any], parent: str, number: int,
                     spec: dict[str, Any], base: str) -> tuple[dict, CustomJob, Path]:
        chosen = _suggest(spec["parameters"], number)
        pools = json.loads(json.dumps(job["trialJobSpec"]["workerPoolSpecs"]))
        for pool in pools:
            if pool and "containerSpec" in pool:
                pool["containerSpec"]["args"] = [
                    *pool["containerSpec"].get("args", []),
                    *[item for p in chosen for item in (f"--{p['parameterId']}",
                                                        _flag(p["value"]))]]
        metrics_file = self.work_dir / f"tuning{job['name'].rsplit('/', 1)[1]}-trial{number}" \
                                       f".metrics"
        with self._lock:
            name = f"{parent}/customJobs/{len(self.jobs) + 1}"
            resource = {"displayName": f"{job['displayName']}-trial-{number}", "name": name,
                        "jobSpec": {**job["trialJobSpec"], "workerPoolSpecs": pools,
                                    "baseOutputDirectory": {
                                        "outputUriPrefix": f"{base}/{number}/"}}}
            custom_job = CustomJob(name, resource, [])
            self.jobs[name] = custom_job
            trial = {"id": str(number), "state": "ACTIVE", "parameters": chosen,
                     "startTime": _now(), "customJob": name}
            job["trials"].append(trial)
        try:
            custom_job.replicas = self._start_replicas(custom_job, {
                "CLOUD_ML_TRIAL_ID": str(number), "CLOUD_ML_HP_METRIC_FILE": str(metrics_file)})
        except LookupError as missing:
            custom_job.state, custom_job.error = "JOB_STATE_FAILED", str(missing)
        return trial, custom_job, metrics_file

    def _upload(self, parent: str, body: dict[str, Any]) -> tuple[int, Any]:
        # gcpc's launcher writes the request's JSON in snake_case, the REST clients in
        # camelCase; the API reads both.
        model = body.get("model", {})
        container = model.get("container_spec") or model.get("containerSpec") or {}
        image = container.get("image_uri") or container.get("imageUri") or ""
        problem = image and _reference_problem(image)
        if problem:
            return 400, _error(400, problem)
        with self._lock:
            number = len(self.models) + 1
            parent_model = body.get("parent_model") or body.get("parentModel")
            model = parent_model or f"{parent}/models/{number}"
            version = str(1 + sum(m["model"] == model for m in self.models))
            self.models.append({"model": model, "version": version, "request": body})
            aliases = body.get("model", {}).get("version_aliases") or []
            if version == "1" or "default" in aliases:
                self.set_default(model, version)
        operation = f"{model}/operations/{number}"
        return 200, {"name": operation, "done": False}

    def _operation(self, name: str, body: Any) -> tuple[int, Any]:
        model = name.split("/operations/")[0]
        version = next(m["version"] for m in reversed(self.models) if m["model"] == model)
        return 200, {"name": name, "done": True, "response": {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
            "model": model, "modelVersionId": version}}

    def set_default(self, model: str, version: str) -> None:
        """Gives `version` the `default` alias (as the console or an alias update would)."""
        self.defaults[model] = version

    def _merge_aliases(self, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        model, _, version = urllib.parse.unquote(name).partition("@")
        if not any(m["model"] == model and m["version"] == version for m in self.models):
            return 404, _error(404, f"Model {name} not found")
        if "default" in body.get("versionAliases", []):
            self.set_default(model, version)
        return 200, {"name": model, "versionId": version,
                     "versionAliases": body.get("versionAliases", [])}

    def _get_model(self, name: str, body: Any) -> tuple[int, Any]:
        # `ID@VERSION` names a version, `ID` (or `ID@default`) the default one.
        name, _, version = urllib.parse.unquote(name).partition("@")
        version = self.defaults.get(name) if version in ("", "default") else version
        found = next((m for m in self.models if m["model"] == name
                      and m["version"] == version), None)
        if found is None:
            return 404, _error(404, f"model {name} not found")
        uploaded = found["request"]["model"]
        aliases = ["default"] if self.defaults.get(name) == version else []
        return 200, {"name": name, "versionId": version, "versionAliases": aliases,
                     "displayName": uploaded.get("display_name", ""),
                     "artifactUri": uploaded.get("artifact_uri", ""),
                     "labels": uploaded.get("labels", {})}

    def _model_resource(self, entry: dict[str, Any]) -> dict[str, Any]:
        uploaded = entry["request"]["model"]
        return {"name": entry["model"], "versionId": entry["version"],
                "versionAliases": ["default"] if self.defaults.get(entry["model"]) ==
                entry["version"] else [],
                "displayName": uploaded.get("display_name") or uploaded.get("displayName", ""),
                "artifactUri": uploaded.get("artifact_uri") or uploaded.get("artifactUri", ""),
                "labels": uploaded.get("labels", {})}

    def _list_models(self, parent: str, body: Any) -> tuple[int, Any]:
        # ListModels: each model once, as its default version; `display_name="..."` and
        # `labels.KEY="VALUE"` terms filter; newest first (the order the project asks for).
        text = self._request.query.get("filter", [""])[0]
        wanted = re.search(r'(?<![.\w])display_name="([^"]*)"', text)
        labels = dict(re.findall(r'labels\.([a-z0-9_-]+)="([^"]*)"', text))
        found = [self._model_resource(m) for m in reversed(self.models)
                 if m["model"].startswith(parent + "/models/")
                 and self.defaults.get(m["model"]) == m["version"]]
        if wanted:
            found = [m for m in found if m["displayName"] == wanted[1]]
        return 200, {"models": [m for m in found if all(
            (m.get("labels") or {}).get(k) == v for k, v in labels.items())]}

    def _list_versions(self, name: str, body: Any) -> tuple[int, Any]:
        # ListModelVersions: every version, newest first; `labels.KEY="VALUE"` terms filter.
        labels = dict(re.findall(r'labels\.([a-z0-9_-]+)="([^"]*)"',
                                 self._request.query.get("filter", [""])[0]))
        found = [self._model_resource(m) for m in reversed(self.models) if m["model"] == name]
        return 200, {"models": [m for m in found if all(
            (m.get("labels") or {}).get(k) == v for k, v in labels.items())]}

    def _build(self, parent: str, body: dict[str, Any]) -> tuple[int, Any]:
        # Google's client sends `projects/P/builds` with the location in its routing header
        # (x-goog-request-params, from CreateBuildRequest.parent) when project_id is set.
        routed = urllib.parse.parse_qs(self._request.routing).get("location", [""])[0]
        location = parent.split("/locations/")[1] if "/locations/" in parent \
            else routed or "global"
        parent = f"{parent.split('/locations/')[0]}/locations/{location}"
        if location != "global" and not re.fullmatch(r"[a-z]+-[a-z]+[0-9]+", location):
            return 400, _error(400, f"invalid location {location!r}: Cloud Build runs in "
                               "regions and global")
        pool = body.get("options", {}).get("pool", {}).get("name", "")
        # A build in a private pool is sent to the pool's region; elsewhere the pool is
        # not found (googleapis/nodejs-cloudbuild#300, spinnaker/spinnaker#6600).
        if pool and (pool not in self.worker_pools or f"/locations/{location}/" not in pool):
            return 404, _error(404, f'workerpool not found: "{pool}"')
        closed = pool and self.worker_pools[pool]["privatePoolV1Config"]["networkConfig"][
            "egressOption"] == "NO_PUBLIC_EGRESS"
        with self._lock:
            for step in body.get("steps", []):
                self.built[step.get("id", "")] = self._legacy_builder_runs(step.get("args", []))
            number = len(self.builds) + 1
            name = f"{parent}/operations/build-{number}"
            build = {**body, "id": f"emulated-build-{number}", "status": "QUEUED",
                     "log_url": f"https://console.cloud.google.com/cloud-build/builds/{number}"}
            self.builds[name] = {"build": build, "started": time.monotonic(), "unreachable": [
                u for step in body.get("steps", []) for u in _public_reads(step["args"])]
                if closed else []}
        return 200, self._build_state(name)

    def _legacy_builder_runs(self, args: list[str]) -> list[str]:
        """What `docker build ARGS` runs without BuildKit: every stage of its Dockerfile
        (`--file`, else `Dockerfile` in the context), so every RUN, in order."""
        if self.checkout is None or args[:1] != ["build"]:
            return []
        name = args[args.index("--file") + 1] if "--file" in args else "Dockerfile"
        text = re.sub(r"\\\n\s*", " ", (self.checkout / name).read_text())
        return [line.strip()[4:] for line in text.splitlines()
                if line.strip().upper().startswith("RUN ")]

    def _build_operation(self, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.builds:
            return 404, _error(404, f"operation {name} not found")
        return 200, self._build_state(name)

    def _build_state(self, name: str) -> dict[str, Any]:
        """The build's operation: WORKING for `build_seconds`, then done, its images pushed
        (each with a digest of its own) to the fake Artifact Registry."""
        with self._lock:
            return self._advance_build(name)

    def _advance_build(self, name: str) -> dict[str, Any]:
        record = self.builds[name]
        build = record["build"]
        done = time.monotonic() - record["started"] >= self.build_seconds
        build.setdefault("startTime", _now())  # as Cloud Build's Build has them
        if done:
            build.setdefault("finishTime", _now())
        metadata = {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1."
                             "BuildOperationMetadata", "build": build}
        if not done:
            build["status"] = "WORKING"
            return {"name": name, "done": False, "metadata": metadata}
        if record["unreachable"]:  # a pool without public egress cannot read the internet
            build.update(status="FAILURE", statusDetail=f"could not reach "
                         f"{record['unreachable'][0]}")
            return {"name": name, "done": True, "metadata": metadata, "error": {
                "code": 2, "message": "Build failed; check build logs for details"}}
        if build["status"] != "SUCCESS":
            pushed = []
            for image in build.get("images", []):
                digest = "sha256:" + hashlib.sha256(
                    (json.dumps(build, sort_keys=True) + image).encode()).hexdigest()
                self.tags[_tag_name(image)] = \
                    f"{_tag_name(image).split('/tags/')[0]}/versions/{digest}"
                pushed.append({"name": image, "digest": digest})
            build.update(status="SUCCESS", results={"images": pushed})
        return {"name": name, "done": True, "metadata": metadata,
                "response": {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1.Build",
                             **build}}

    def _worker_pool(self, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.worker_pools:
            return 404, _error(404, f'workerpool not found: "{name}"')
        return 200, self.worker_pools[name]

    def _persistent_resource(self, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.persistent_resources:
            return 404, _error(404, f"PersistentResource {name} not found")
        return 200, {"name": name, "state": "RUNNING", **self.persistent_resources[name]}

    def _get_pipeline_job(self, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.pipeline_jobs:
            return 404, _error(404, f"PipelineJob {name} not found")
        return 200, self.pipeline_jobs[name].pipeline_job()

    def closed_pool(self, name: str) -> None:
        """A private pool without public egress (WorkerPool.privatePoolV1Config)."""
        self.worker_pools[name] = {"name": name, "state": "RUNNING", "privatePoolV1Config": {
            "workerConfig": {"machineType": "e2-standard-8"},
            "networkConfig": {"egressOption": "NO_PUBLIC_EGRESS"}}}

    def _get_project(self, project_id: str, body: Any) -> tuple[int, Any]:
        return 200, {"name": f"projects/{PROJECT_NUMBER}", "projectId": project_id,
                     "state": "ACTIVE"}

    def _held(self, resource: str, asked: list[str]) -> list[str]:
        """What the caller holds on `resource`: every permission but `denied`, or with
        `grants` set, those granted on the resource or on a resource above it (IAM
        inherits downward: a project's grants reach its repositories, not the reverse)."""
        if self.grants is None:
            return [p for p in asked if p not in self.denied]
        parts = resource.split("/")
        above = {"/".join(parts[:n]) for n in range(2, len(parts) + 1)}
        held = set().union(*(self.grants.get(r, set()) for r in above | {resource}))
        return [p for p in asked if p in held and p not in self.denied]

    def _test_permissions(self, resource: str, body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"permissions": self._held(resource, (body or {}).get("permissions", []))}

    def _test_bucket(self, bucket: str, body: Any) -> tuple[int, Any]:
        asked = self._request.query.get("permissions", [])
        return 200, {"kind": "storage#testIamPermissionsResponse",
                     "permissions": self._held(f"gs://{bucket}", asked)}

    def _key_policy(self, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.key_policies:
            return 403, _error(403, f"Permission 'cloudkms.cryptoKeys.getIamPolicy' denied on "
                                    f"resource '{name}' (or it may not exist).",
                               "PERMISSION_DENIED")
        return 200, {"version": 1, "etag": "BwX=", "bindings": self.key_policies[name]}

    def _get_tag(self, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.tags:
            return 404, _error(404, f"tag {name} not found")
        return 200, {"name": name, "version": self.tags[name]}

    # --- CustomJob replicas ---------------------------------------------------------------

    def image_problem(self, image: str) -> str | None:
        """Why Vertex AI would refuse or fail to pull `image`, or None. Only the project's
        repositories (`entrypoints`) are looked up; others (Google's images) are taken as
        they are."""
        problem = _reference_problem(image)
        if problem:
            return problem
        repository = _repository(image)
        if repository not in self.entrypoints:
            return None
        if "@" in image:
            version = f"{_tag_name(repository + ':x').split('/tags/')[0]}/versions/" \
                      f"{image.split('@', 1)[1]}"
            if version not in self.tags.values():
                return f"image {image} cannot be pulled (no such digest)"
        elif _tag_name(image) not in self.tags:
            return f"image {image} cannot be pulled (no such tag)"
        return None

    def _command(self, image: str) -> list[str]:
        repository = _repository(image)
        if repository not in self.entrypoints:
            raise LookupError(f"image {image} cannot be pulled (unknown repository)")
        problem = self.image_problem(image)
        if problem:
            raise LookupError(problem)
        return list(self.entrypoints[repository])

    def _start_replicas(self, job: CustomJob,
                        trial_env: dict[str, str] | None = None) -> list[Replica]:
        spec = job.resource["jobSpec"]
        pools = spec["workerPoolSpecs"]
        counts = [int(p.get("replicaCount", 0)) if p else 0 for p in pools]
        addresses = iter(f"localhost:{port}" for port in _free_ports(sum(counts)))
        by_pool = [[next(addresses) for _ in range(n)] for n in counts]
        cluster = {ROLES[i]: hosts for i, hosts in enumerate(by_pool) if hosts and i < 3}
        spec_cluster = {f"workerpool{i}": hosts for i, hosts in enumerate(by_pool) if hosts}
        base = spec.get("baseOutputDirectory", {}).get("outputUriPrefix", "").rstrip("/")
        replicas = []
        for pool, (definition, hosts) in enumerate(zip(pools, by_pool, strict=True)):
            if not hosts:
                continue
            container = definition["containerSpec"]
            # The image is pulled before any command runs, the job's own command included.
            problem = self.image_problem(container["imageUri"])
            if problem:
                raise LookupError(problem)
            command = list(self.replica_command or container.get("command")
                           or self._command(container["imageUri"]))
            args, expected_gpus = _without_gpu_expectation(
                [] if self.replica_command else container.get("args", []))
            args, plan = _on_cpus(args)
            if expected_gpus and BENCHMARK_MODULE in command:
                # The GPU benchmark measures this machine's CPUs in place of its GPU, and
                # its results file says so (`"device": "cpu"`).
                args.append("--allow-cpu")
            for index in range(len(hosts)):
                env = {**self.environment, **(trial_env or {}),
                       **{e["name"]: e["value"] for e in container.get("env", [])}}
                if sum(counts) > 1:
                    env["TF_CONFIG"] = json.dumps({
                        "cluster": cluster, "task": {"type": ROLES[pool], "index": index,
                                                     "trial": ""},
                        "job": {k: v for k, v in spec.items() if k == "workerPoolSpecs"},
                        "environment": "cloud"})
                env["CLUSTER_SPEC"] = json.dumps({
                    "cluster": spec_cluster, "environment": "cloud",
                    "task": {"type": f"workerpool{pool}", "index": index}})
                if base:
                    env.update(AIP_MODEL_DIR=f"{base}/model/",
                               AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
                               AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/")
                log = self.work_dir / f"job{job.name.rsplit('/', 1)[1]}-pool{pool}-{index}.log"
                with open(log, "w") as out:
                    process = subprocess.Popen([*command, *args],
                                               env=env, stdout=out, stderr=subprocess.STDOUT,
                                               cwd=self.work_dir)
                replicas.append(Replica(pool, index, env, process, log, expected_gpus, plan))
        return replicas

    def _update(self, job: CustomJob) -> None:
        if job.state == "JOB_STATE_QUEUED":
            self._expire(job)
        region = job.name.split("/")[3]
        if job.state == "JOB_STATE_QUEUED" and \
                not self._stocked_out(region, job.resource.get("jobSpec", {}), self.queued):
            job.state = "JOB_STATE_RUNNING"  # its machines came
            try:
                job.replicas = self._start_replicas(job)
                job.resource["startTime"] = _now(self.start_up_seconds)
            except LookupError as missing:
                job.state, job.error = "JOB_STATE_FAILED", str(missing)
        if job.state != "JOB_STATE_RUNNING":
            return
        training = [r for r in job.replicas if r.pool < 2]
        # Any replica that fails fails the job, a parameter server's or evaluator's too.
        failed = [r for r in job.replicas if r.process.poll() not in (None, 0)]
        if failed:
            self._stop(job.replicas)
            tail = failed[0].log.read_text()[-2000:]
            job.state = "JOB_STATE_FAILED"
            job.error = f"replica workerpool{failed[0].pool}-{failed[0].index} exited with " \
                        f"{failed[0].process.returncode}: {tail}"
            job.resource["endTime"] = _now()
        elif all(r.process.poll() == 0 for r in training):
            self._stop(job.replicas)
            job.state = "JOB_STATE_SUCCEEDED"
            job.resource["endTime"] = _now()  # as Vertex AI sets it on every end

    def _expire(self, job: CustomJob) -> None:
        """A queued FLEX_START job whose maxWaitDuration has passed ends without starting,
        in the form `flex_expiry` names."""
        scheduling = job.resource.get("jobSpec", {}).get("scheduling", {})
        wait = str(scheduling.get("maxWaitDuration") or "").rstrip("s")
        if enum_name("strategy", scheduling.get("strategy")) != "FLEX_START" or not wait:
            return
        if time.time() - job.created < float(wait):
            return
        job.state = f"JOB_STATE_{self.flex_expiry}"
        job.resource["endTime"] = _now()
        if self.flex_expiry == "FAILED":
            job.error_code = 4
            job.error = "the job did not start within its maxWaitDuration (emulated wording)"

    @staticmethod
    def _stop(replicas: list[Replica]) -> None:
        for replica in replicas:
            if replica.process.poll() is None:
                replica.process.terminate()
        for replica in replicas:
            try:
                replica.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                replica.process.kill()
                replica.process.wait()

    # --- HTTP -----------------------------------------------------------------------------

    def _handler(self):
        def respond(request, method: str, body: Any) -> tuple[int, Any]:
            host = request.headers.get("X-Emulated-Host", "")
            routing = urllib.parse.unquote(request.headers.get("x-goog-request-params", ""))
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.path).query)
            self.requests.append(Recorded(method, request.path.split("?")[0], host, body,
                                          routing, query))
            self._request.query = query
            self._request.routing = routing
            self._request.host = request.headers.get("Host", "")
            return self._route(method, request.path, body)

        return json_handler(respond)


def _now(seconds_ago: float = 0.0) -> str:
    moment = time.time() - seconds_ago
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + \
        f".{int(moment * 1000) % 1000:03d}Z"


def _flag(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _measurement(path: Path, metric: str, spec: dict) -> float | None:
    """A trial's final measurement from its cloudml-hypertune metrics file, as the study's
    `measurementSelectionType` selects it: the last report (also when unspecified,
    StudySpec's documented default), or the best by the metric's goal."""
    if not path.is_file():
        return None
    values = [json.loads(line).get(metric) for line in path.read_text().splitlines()]
    values = [float(v) for v in values if v is not None]
    if not values:
        return None
    if spec.get("measurementSelectionType") != "BEST_MEASUREMENT":
        return values[-1]
    return max(values) if spec["metrics"][0].get("goal") == "MAXIMIZE" else min(values)


_VALUE_SPECS = ("doubleValueSpec", "integerValueSpec", "discreteValueSpec",
                "categoricalValueSpec")


def _study_problem(spec: dict[str, Any]) -> str | None:
    """What Vertex AI would refuse in a StudySpec (REST reference: StudySpec)."""
    if not spec.get("metrics"):
        return "studySpec.metrics: at least one metric is required"
    for p in spec.get("parameters", []):
        kinds = [k for k in _VALUE_SPECS if k in p]
        if len(kinds) != 1 or not p.get("parameterId"):
            return f"studySpec.parameters: {p.get('parameterId')!r} needs an id and exactly " \
                   "one value spec"
        value = p[kinds[0]]
        if kinds[0] in ("doubleValueSpec", "integerValueSpec"):
            low, high = float(value["minValue"]), float(value["maxValue"])
            if low > high:
                return f"parameter {p['parameterId']}: minValue above maxValue"
            if p.get("scaleType") in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE") and low <= 0:
                return f"parameter {p['parameterId']}: a log scale needs a positive minValue"
        if kinds[0] == "discreteValueSpec" and value["values"] != sorted(value["values"]):
            return f"parameter {p['parameterId']}: discrete values must be increasing"
        if kinds[0] == "doubleValueSpec" and spec.get("algorithm") == "GRID_SEARCH":
            return "GRID_SEARCH cannot search a DOUBLE parameter"
    return None


def _suggest(parameters: list[dict[str, Any]], number: int) -> list[dict[str, Any]]:
    """A trial's values, drawn at random within each spec (seeded by the trial)."""
    import math
    import random

    rng = random.Random(number)
    chosen = []
    for p in parameters:
        if "doubleValueSpec" in p:
            low, high = (float(p["doubleValueSpec"][k]) for k in ("minValue", "maxValue"))
            value = math.exp(rng.uniform(math.log(low), math.log(high))) \
                if p.get("scaleType") == "UNIT_LOG_SCALE" else rng.uniform(low, high)
        elif "integerValueSpec" in p:
            value = rng.randint(int(p["integerValueSpec"]["minValue"]),
                                int(p["integerValueSpec"]["maxValue"]))
        elif "discreteValueSpec" in p:
            value = rng.choice(p["discreteValueSpec"]["values"])
        else:
            value = rng.choice(p["categoricalValueSpec"]["values"])
        chosen.append({"parameterId": p["parameterId"], "value": value})
    return chosen


def _public_reads(args: list[str]) -> list[str]:
    """What a `docker build ARGS` step of the project's Dockerfiles reads from the
    internet: an image named without a registry host (Docker Hub), PyPI without a
    PIP_INDEX, Google's apt repository for the GPU image without an APT_MIRROR."""
    given = dict(a.split("=", 1) for a, flag in zip(args[1:], args, strict=False)
                 if flag == "--build-arg")
    found = [f"Docker Hub ({value})" for key, value in given.items()
             if key in ("PYTHON_BASE", "BEAM_SDK")
             and ("/" not in value or not re.search(r"[.:]", value.split("/")[0]))]
    found += [] if given.get("PIP_INDEX") else ["PyPI (https://pypi.org/simple)"]
    if "docker/gpu.Dockerfile" in args and not given.get("APT_MIRROR"):
        found.append("https://packages.cloud.google.com/apt")
    return found


def _error(code: int, message: str, status: str = "") -> dict[str, Any]:
    status = status or {404: "NOT_FOUND", 400: "INVALID_ARGUMENT",
                        429: "RESOURCE_EXHAUSTED"}.get(code, "UNKNOWN")
    return {"error": {"code": code, "message": message, "status": status}}


def kms_key_name(resource: Any) -> str:
    """A resource's `encryptionSpec.kmsKeyName` in either of the JSON spellings Vertex AI
    reads (protobuf's JSON parser takes the lowerCamel and the proto field names: gcpc's
    launchers send `encryption_spec`/`kms_key_name`), or "" (also when `resource` is
    already the spec)."""
    if not isinstance(resource, dict):
        return ""
    spec = resource.get("encryptionSpec") or resource.get("encryption_spec") or resource
    return str(spec.get("kmsKeyName") or spec.get("kms_key_name") or "") \
        if isinstance(spec, dict) else ""


#: The creates Vertex AI refuses without a key under constraints/gcp.restrictNonCmekServices,
#: and where their request carries it (REST names).
CMEK_CREATES = ((r"/customJobs$", ()), (r"/hyperparameterTuningJobs$", ()),
                (r"/models:upload$", ("model",)), (r"/endpoints$", ()),
                (r"/batchPredictionJobs$", ()), (r"/pipelineJobs$", ()))


def cmek_refusal(path: str, body: Any) -> str:
    """Why Vertex AI refuses this create under the org policy that requires CMEK ("" when
    it does not): the message of the constraint's FAILED_PRECONDITION (Organization
    Policy docs, "Restricting non-CMEK services")."""
    for pattern, where in CMEK_CREATES:
        if re.search(pattern, path):
            found = body if isinstance(body, dict) else {}
            for key in where:
                found = found.get(key) or {}
            if not kms_key_name(found):
                project = path.split("/")[3] if path.count("/") > 3 else "PROJECT"
                return (f"Constraint `constraints/gcp.restrictNonCmekServices` violated for "
                        f"`projects/{project}` attempting to create a resource without "
                        "specifying a KMS CryptoKey.")
    return ""


def enum_name(kind: str, value: Any) -> str:
    """An aiplatform_v1 enum field as its name: Google's REST clients send enums as
    numbers (`use_integers_for_enums`), gcpc's launcher and users' JSON as names."""
    from google.cloud import aiplatform_v1

    enum = {"accelerator": aiplatform_v1.AcceleratorType,
            "strategy": aiplatform_v1.Scheduling.Strategy}[kind]
    return enum(value).name if isinstance(value, int) else str(value or "")


def aiplatform_pool(pool: Any) -> dict[str, Any]:
    """A REST (camelCase) worker pool as the project's snake_case pool dicts."""
    if not pool:
        return {}
    machine = pool.get("machineSpec", {})
    return {"replica_count": int(pool.get("replicaCount", 0)),
            "machine_spec": {"machine_type": machine.get("machineType", ""),
                             "accelerator_type": enum_name("accelerator",
                                                           machine.get("acceleratorType")),
                             "accelerator_count": int(machine.get("acceleratorCount", 0))},
            "container_spec": {"image_uri": pool.get("containerSpec", {}).get("imageUri", "")}}


def _reference_problem(image: str) -> str | None:
    """Vertex AI's reading of an image reference: a tag or a digest, never both."""
    name = image.split("@", 1)[0]
    if "@" in image and ":" in name.rsplit("/", 1)[-1]:
        return f"Invalid image URI {image}: it has both a tag and a digest"
    if not re.fullmatch(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+"
                        r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})?", image):
        return f"Invalid image URI {image}"
    return None


def _repository(image: str) -> str:
    """An image reference without its tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


def _without_gpu_expectation(args: list[str]) -> tuple[list[str], int]:
    """The arguments without `--expected-gpus N`, and N (0 when absent)."""
    if "--expected-gpus" not in args:
        return list(args), 0
    at = args.index("--expected-gpus")
    return [*args[:at], *args[at + 2:]], int(args[at + 1])


def _on_cpus(args: list[str]) -> tuple[list[str], dict[str, Any] | None]:
    """The arguments with the training plan's GPU parts turned off, and the plan as sent."""
    if "--training-plan" not in args:
        return list(args), None
    at = args.index("--training-plan")
    sent = json.loads(args[at + 1])
    cpus = {**sent, "xla": False, "mixed_precision": "off",
            "all_reduce": "ring" if sent["all_reduce"] == "nccl" else sent["all_reduce"]}
    return [*args[:at + 1], json.dumps(cpus), *args[at + 2:]], sent


def _tag_name(image: str) -> str:
    """`LOCATION-docker.pkg.dev/PROJECT/REPO/PACKAGE:TAG` -> its Artifact Registry name."""
    host, project, repository, rest = image.split("/", 3)
    package, tag = rest.rsplit(":", 1)
    location = host.split("-docker.pkg.dev")[0]
    return (f"projects/{project}/locations/{location}/repositories/{repository}/packages/"
            f"{package}/tags/{tag}")
