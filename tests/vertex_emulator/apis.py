"""A fake of the Google REST APIs a Vertex AI run calls, on 127.0.0.1, recording requests.

Vertex AI: `customJobs` create/get/cancel, `models:upload` with its operation, and `models`
get (the default version: a model's first version, then the last uploaded with the
`default` alias; Vertex AI docs: "How to use model version aliases"); Cloud
Build: `builds` create (the build "pushes" the image to the fake Artifact Registry); Artifact
Registry: `tags` get. A CustomJob starts every replica of its worker pools as a local
process with the container's command and arguments and the environment Vertex AI sets
(Vertex AI docs: "Distributed training"; CustomJobSpec.baseOutputDirectory):

- `TF_CONFIG`: `cluster` with `chief` (pool 0), `worker` (pool 1) and `ps` (pool 2) only;
  `task` with the replica's type (`evaluator` for pool 3) and index; `job`, `environment:
  cloud`. Not set for a job of a single replica.
- `CLUSTER_SPEC`: the pools as `workerpool0..3`, and this replica's pool and index.
- `AIP_MODEL_DIR`, `AIP_CHECKPOINT_DIR`, `AIP_TENSORBOARD_LOG_DIR`: `<base>/model/`,
  `<base>/checkpoints/`, `<base>/logs/`, as `gs://` URIs with a trailing slash.

The job succeeds when every replica of pools 0 and 1 has exited with 0 (parameter
servers and evaluators are then stopped) and fails when one of them fails.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import re
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

ROLES = ("chief", "worker", "ps", "evaluator")


@dataclasses.dataclass
class Recorded:
    """One request: method, path, the host the client meant, and the JSON body."""

    method: str
    path: str
    host: str
    body: Any


@dataclasses.dataclass
class Replica:
    pool: int
    index: int
    env: dict[str, str]
    process: subprocess.Popen
    log: Path


@dataclasses.dataclass
class CustomJob:
    name: str
    resource: dict[str, Any]
    replicas: list[Replica]
    state: str = "JOB_STATE_RUNNING"
    error: str = ""


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
    """

    def __init__(self, work_dir: Path, entrypoints: dict[str, list[str]],
                 environment: dict[str, str] | None = None):
        self.work_dir = work_dir
        self.entrypoints = entrypoints
        self.environment = environment or {}
        self.requests: list[Recorded] = []
        self.jobs: dict[str, CustomJob] = {}
        self.tags: dict[str, str] = {}  # Artifact Registry tag name -> version name
        self.models: list[dict[str, Any]] = []
        self.defaults: dict[str, str] = {}  # model -> its default version
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> "FakeGoogleApis":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        for job in self.jobs.values():
            for replica in job.replicas:
                if replica.process.poll() is None:
                    replica.process.kill()
                    replica.process.wait()

    def recorded(self, pattern: str, method: str = "POST") -> list[Recorded]:
        """The requests whose path matches `pattern`."""
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # --- Routes -------------------------------------------------------------------------

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        path = path.split("?", 1)[0]
        routes = [
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+)/customJobs$", self._create_job),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/[^/:]+)$", self._get_job),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/[^/:]+):cancel$",
             self._cancel_job),
            ("POST", r"^/v1/(projects/[^/]+/locations/[^/]+)/models:upload$", self._upload),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/models/[^/]+/operations/[^/]+)$",
             self._operation),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/models/[^/:@]+)$", self._get_model),
            ("POST", r"^/v1/(projects/[^/]+(?:/locations/[^/]+)?)/builds$", self._build),
            ("GET", r"^/v1/(projects/[^/]+/locations/[^/]+/repositories/[^/]+/packages/[^/]+"
                    r"/tags/[^/]+)$", self._get_tag),
        ]
        for verb, pattern, handler in routes:
            match = re.match(pattern, path)
            if verb == method and match:
                return handler(match.group(1), body)
        return 404, _error(404, f"no such method: {method} {path}")

    def _create_job(self, parent: str, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            name = f"{parent}/customJobs/{len(self.jobs) + 1}"
            resource = {**body, "name": name, "state": "JOB_STATE_PENDING"}
            job = CustomJob(name, resource, [])
            self.jobs[name] = job
        try:
            job.replicas = self._start_replicas(job)
        except LookupError as missing:
            job.state, job.error = "JOB_STATE_FAILED", str(missing)
        return 200, {**resource, "state": job.state}

    def _get_job(self, name: str, body: Any) -> tuple[int, Any]:
        job = self.jobs.get(name)
        if job is None:
            return 404, _error(404, f"{name} not found")
        self._update(job)
        resource = {**job.resource, "state": job.state}
        if job.error:
            resource["error"] = {"code": 13, "message": job.error}
        return 200, resource

    def _cancel_job(self, name: str, body: Any) -> tuple[int, Any]:
        job = self.jobs[name]
        self._stop(job.replicas)
        job.state = "JOB_STATE_CANCELLED"
        return 200, {}

    def _upload(self, parent: str, body: dict[str, Any]) -> tuple[int, Any]:
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

    def _get_model(self, name: str, body: Any) -> tuple[int, Any]:
        version = self.defaults.get(name)
        found = next((m for m in self.models if m["model"] == name
                      and m["version"] == version), None)
        if found is None:
            return 404, _error(404, f"model {name} not found")
        uploaded = found["request"]["model"]
        return 200, {"name": name, "versionId": version, "versionAliases": ["default"],
                     "displayName": uploaded.get("display_name", ""),
                     "artifactUri": uploaded.get("artifact_uri", ""),
                     "labels": uploaded.get("labels", {})}

    def _build(self, parent: str, body: dict[str, Any]) -> tuple[int, Any]:
        images = body.get("images", [])
        digest = "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        for image in images:
            self.tags[_tag_name(image)] = f"{_tag_name(image).split('/tags/')[0]}/versions/" \
                                          f"{digest}"
        build = {**body, "id": "emulated-build", "status": "SUCCESS",
                 "results": {"images": [{"name": i, "digest": digest} for i in images]}}
        return 200, {
            "name": f"{parent}/operations/build-{len(self.tags)}", "done": True,
            "metadata": {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1."
                                  "BuildOperationMetadata", "build": build},
            "response": {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1.Build",
                         **build}}

    def _get_tag(self, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.tags:
            return 404, _error(404, f"tag {name} not found")
        return 200, {"name": name, "version": self.tags[name]}

    # --- CustomJob replicas ---------------------------------------------------------------

    def _command(self, image: str) -> list[str]:
        repository = image.split("@", 1)[0].rsplit(":", 1)[0]
        if repository not in self.entrypoints:
            raise LookupError(f"image {image} cannot be pulled (unknown repository)")
        if "@" in image:
            version = f"{_tag_name(repository + ':x').split('/tags/')[0]}/versions/" \
                      f"{image.split('@', 1)[1]}"
            if version not in self.tags.values():
                raise LookupError(f"image {image} cannot be pulled (no such digest)")
        return list(self.entrypoints[repository])

    def _start_replicas(self, job: CustomJob) -> list[Replica]:
        spec = job.resource["jobSpec"]
        pools = spec["workerPoolSpecs"]
        counts = [int(p.get("replicaCount", 0)) if p else 0 for p in pools]
        addresses = iter(f"localhost:{port}" for port in _free_ports(sum(counts)))
        by_pool = [[next(addresses) for _ in range(n)] for n in counts]
        cluster = {ROLES[i]: hosts for i, hosts in enumerate(by_pool) if hosts and i < 3}
        spec_cluster = {f"workerpool{i}": hosts for i, hosts in enumerate(by_pool) if hosts}
        base = spec.get("baseOutputDirectory", {}).get("outputUriPrefix", "").rstrip("/")
        replicas = []
        for pool, (definition, hosts) in enumerate(zip(pools, by_pool)):
            if not hosts:
                continue
            container = definition["containerSpec"]
            command = list(container.get("command") or self._command(container["imageUri"]))
            for index in range(len(hosts)):
                env = {**self.environment,
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
                    process = subprocess.Popen([*command, *container.get("args", [])],
                                               env=env, stdout=out, stderr=subprocess.STDOUT,
                                               cwd=self.work_dir)
                replicas.append(Replica(pool, index, env, process, log))
        return replicas

    def _update(self, job: CustomJob) -> None:
        if job.state != "JOB_STATE_RUNNING":
            return
        training = [r for r in job.replicas if r.pool < 2]
        failed = [r for r in training if r.process.poll() not in (None, 0)]
        if failed:
            self._stop(job.replicas)
            tail = failed[0].log.read_text()[-2000:]
            job.state = "JOB_STATE_FAILED"
            job.error = f"replica workerpool{failed[0].pool}-{failed[0].index} exited with " \
                        f"{failed[0].process.returncode}: {tail}"
        elif all(r.process.poll() == 0 for r in training):
            self._stop(job.replicas)
            job.state = "JOB_STATE_SUCCEEDED"

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
        apis = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw.strip() else None
                host = self.headers.get("X-Emulated-Host", "")
                apis.requests.append(Recorded(method, self.path.split("?")[0], host, body))
                status, answer = apis._route(method, self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 - http.server's naming
                self._serve("GET")

            def do_POST(self):  # noqa: N802 - http.server's naming
                self._serve("POST")

            def log_message(self, *args):
                pass

        return Handler


def _error(code: int, message: str) -> dict[str, Any]:
    status = {404: "NOT_FOUND", 400: "INVALID_ARGUMENT"}.get(code, "UNKNOWN")
    return {"error": {"code": code, "message": message, "status": status}}


def _tag_name(image: str) -> str:
    """`LOCATION-docker.pkg.dev/PROJECT/REPO/PACKAGE:TAG` -> its Artifact Registry name."""
    host, project, repository, rest = image.split("/", 3)
    package, tag = rest.rsplit(":", 1)
    location = host.split("-docker.pkg.dev")[0]
    return (f"projects/{project}/locations/{location}/repositories/{repository}/packages/"
            f"{package}/tags/{tag}")
