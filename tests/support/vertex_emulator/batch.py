"""Vertex AI's batch prediction jobs, faked with their rules: the job reads its JSONL
instances from Cloud Storage (the emulator), sends them to the model's serving container's
predictor (`trainer.serving.app`, on the model version's artifacts) and writes Vertex AI's
output files.

REST reference, projects.locations.batchPredictionJobs: create, get, list (its filter's
`labels.KEY="VALUE"` terms; BatchPredictionJob.labels). A job has `startTime` once it runs
and `endTime` once it ended, as Vertex AI's resource has them. Refused as Vertex AI
refuses them (400): a model or version the registry does not hold; a custom-trained model
without `dedicatedResources.machineSpec` (it has no automatic resources); an input format
other than `jsonl` or no source URI; an output prefix that is not gs://; more starting
replicas than the most. With `instanceConfig.keyField` the key is left out of what the
model is sent and each output line carries `key` instead of the instance (InstanceConfig).
The output directory is `{outputUriPrefix}/prediction-{model display name}-{time}`, with
`prediction.results-00000-of-00001` and `prediction.errors_stats-00000-of-00001`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from tests.support.vertex_emulator.apis import _error, _now


class BatchPredictionService:
    """The fake jobs; `models` is the fake registry's list, `predictor(model@version)` the
    loaded predictor of a version (shared with the endpoints)."""

    def __init__(self, models: list[dict[str, Any]], predictor: Any):
        self.models = models
        self.predictor = predictor
        self.jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def routes(self) -> list[tuple[str, str, Any]]:
        base = r"^/v1/(projects/[^/]+/locations/[^/]+"
        return [("POST", base + r")/batchPredictionJobs$", self._create),
                ("GET", base + r")/batchPredictionJobs$", self._list),
                ("GET", base + r"/batchPredictionJobs/[0-9]+)$", self._get)]

    def _version(self, model: str) -> dict[str, Any] | None:
        name, _, version = model.partition("@")
        versions = [m for m in self.models if m["model"] == name]
        if not versions:
            return None
        return next((m for m in versions if m["version"] == version), None) if version \
            else versions[-1]

    def _problem(self, body: dict[str, Any]) -> str | None:
        model = body.get("model", "")
        if self._version(model) is None:
            return f"Model {model!r} not found"
        resources = body.get("dedicatedResources") or {}
        if not (resources.get("machineSpec") or {}).get("machineType"):
            return ("The model does not support automatic resources: dedicated_resources "
                    "with a machine_spec is required")
        if int(resources.get("startingReplicaCount") or 1) > int(
                resources.get("maxReplicaCount") or 1):
            return "starting_replica_count must not exceed max_replica_count"
        source = body.get("inputConfig") or {}
        if source.get("instancesFormat") != "jsonl" or not (
                source.get("gcsSource") or {}).get("uris"):
            return "input_config needs instances_format jsonl and gcs_source.uris here"
        prefix = ((body.get("outputConfig") or {}).get("gcsDestination") or {}).get(
            "outputUriPrefix", "")
        if not prefix.startswith("gs://"):
            return f"output_config.gcs_destination.output_uri_prefix {prefix!r} is not gs://"
        return None

    def _create(self, parent: str, body: dict[str, Any], query: Any = None) -> tuple[int, Any]:
        problem = self._problem(body)
        if problem:
            return 400, _error(400, problem)
        with self._lock:
            name = f"{parent}/batchPredictionJobs/{5000 + len(self.jobs)}"
            job = {**body, "name": name, "state": "JOB_STATE_RUNNING",
                   "createTime": _now(), "startTime": _now()}
            self.jobs[name] = job
        threading.Thread(target=self._run, args=(job,), daemon=True).start()
        return 200, job

    def _list(self, parent: str, body: Any, query: Any = None) -> tuple[int, Any]:
        wanted = dict(re.findall(r'labels\.([a-z0-9_-]+)="([^"]*)"',
                                 (query or {}).get("filter", [""])[0]))
        with self._lock:
            found = [job for name, job in self.jobs.items() if name.startswith(f"{parent}/")
                     and all((job.get("labels") or {}).get(k) == v
                             for k, v in wanted.items())]
        return 200, {"batchPredictionJobs": json.loads(json.dumps(found))}

    def _get(self, name: str, body: Any, query: Any = None) -> tuple[int, Any]:
        job = self.jobs.get(name)
        return (200, job) if job else (404, _error(404, f"BatchPredictionJob {name} not found"))

    def _run(self, job: dict[str, Any]) -> None:
        from fastapi import HTTPException

        from trainer.common.gcs import read_bytes, split_gcs_uri, storage_client

        try:
            version = self._version(job["model"])
            predictor = self.predictor(f"{version['model']}@{version['version']}")
            key = (job.get("instanceConfig") or {}).get("keyField", "")
            results, errors = [], []
            for uri in job["inputConfig"]["gcsSource"]["uris"]:
                for line in read_bytes(uri).decode().splitlines():
                    instance = json.loads(line)
                    sent = {k: v for k, v in instance.items() if k != key} if key else instance
                    named = {"key": instance[key]} if key else {"instance": instance}
                    try:
                        answer = predictor.answer({"instances": [sent]})["predictions"][0]
                        results.append({**named, "prediction": answer})
                    except HTTPException as exc:
                        errors.append({**named, "error": {"code": exc.status_code,
                                                          "message": str(exc.detail)}})
            display = version["request"]["model"].get("display_name", "model")
            directory = (f"{job['outputConfig']['gcsDestination']['outputUriPrefix'].rstrip('/')}"
                         f"/prediction-{display}-{time.strftime('%Y_%m_%dT%H_%M_%S')}")
            bucket, prefix = split_gcs_uri(directory + "/")
            for file, lines in (("prediction.results-00000-of-00001", results),
                                ("prediction.errors_stats-00000-of-00001", errors)):
                storage_client().bucket(bucket).blob(prefix + file).upload_from_string(
                    "".join(json.dumps(x) + "\n" for x in lines))
            job.update(state="JOB_STATE_SUCCEEDED", endTime=_now(),
                       outputInfo={"gcsOutputDirectory": directory},
                       completionStats={"successfulCount": str(len(results)),
                                        "failedCount": str(len(errors))})
        except Exception as exc:  # noqa: BLE001 - anything fails the job, as on Vertex AI
            job.update(state="JOB_STATE_FAILED", endTime=_now(),
                       error={"code": 13, "message": repr(exc)})
