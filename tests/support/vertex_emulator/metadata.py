"""Vertex ML Metadata and Vertex AI TensorBoard, as much as Vertex AI Experiments uses
through `aiplatform` (ExperimentRun create/get/list, log_params, log_metrics,
log_time_series_metrics, log of a pipeline job, end_run), over REST, recording nothing
beyond what `FakeGoogleApis` records.

Metadata: the `default` store exists (Vertex AI makes it with a region's first pipeline
run); contexts and artifacts are created with their ID (`contextId`, `artifactId`),
which must match `[a-z0-9][a-z0-9-]{0,127}` (Vertex AI REST reference, CreateContext and
CreateArtifact: "Must be unique across all Contexts in the parent MetadataStore";
refused 400 otherwise, 409 ALREADY_EXISTS for one taken), read, updated whole (PATCH: the
client merges the metadata and sends the whole resource), listed by the `schema_title=`
and `parent_contexts:` terms of a filter, and linked: `addContextChildren` (each child
must exist, 404 otherwise) and `addContextArtifactsAndExecutions`. A pipeline run's
`system.PipelineRun` context is made when the run is (`pipeline_run_context`).

TensorBoard: a tensorboard exists when a test made it (`tensorboards`); its experiments,
runs and time series are created with their IDs and listed; `runs/*:write` keeps each
time series' points (`points`: (run, display name) -> [(step, value)]).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

ID = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")
BASE = r"^/v1/(projects/[^/]+/locations/[^/]+"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _error(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


class MetadataService:
    """The fake's Metadata and TensorBoard resources, by resource name."""

    def __init__(self) -> None:
        self.resources: dict[str, dict[str, Any]] = {}
        self.tensorboards: set[str] = set()  # the TensorBoard instances that exist
        self.points: dict[tuple[str, str], list[tuple[int, float]]] = {}

    def routes(self) -> list[tuple[str, str, Any]]:
        store = BASE + r"/metadataStores/[^/:]+"
        runs = BASE + r"/tensorboards/[^/:]+/experiments/[^/:]+/runs"
        return [
            ("GET", store + r")$", self._store),
            ("POST", store + r"/(?:contexts|artifacts))$", self._create),
            ("GET", store + r"/(?:contexts|artifacts|executions))$", self._list),
            ("GET", store + r"/(?:contexts|artifacts|executions)/[^/:]+)$", self._get),
            ("PATCH", store + r"/(?:contexts|artifacts)/[^/:]+)$", self._update),
            ("POST", store + r"/contexts/[^/:]+):addContextChildren$", self._add_children),
            ("POST", store + r"/contexts/[^/:]+):addContextArtifactsAndExecutions$",
             self._add_artifacts),
            ("GET", BASE + r"/tensorboards/[^/:]+)$", self._tensorboard),
            ("POST", BASE + r"/tensorboards/[^/:]+/experiments)$", self._create),
            ("POST", runs + r")$", self._create),
            ("POST", runs + r"/[^/:]+/timeSeries)$", self._create),
            ("GET", runs + r"/[^/:]+/timeSeries)$", self._list),
            ("GET", BASE + r"/tensorboards/[^/:]+/experiments/[^/:]+"
                           r"(?:/runs/[^/:]+(?:/timeSeries/[^/:]+)?)?)$", self._get),
            ("POST", runs + r"/[^/:]+):write$", self._write),
        ]

    def pipeline_run_context(self, store: str, job_id: str) -> str:
        """Makes a pipeline run's `system.PipelineRun` context (as Vertex AI Pipelines does
        when the run starts); returns its name."""
        name = f"{store}/contexts/{job_id}"
        self.resources.setdefault(name, {
            "name": name, "displayName": job_id, "schemaTitle": "system.PipelineRun",
            "schemaVersion": "0.0.1", "metadata": {}, "createTime": _now(),
            "updateTime": _now(), "etag": "1"})
        return name

    def contexts(self, schema_title: str) -> list[dict[str, Any]]:
        """The contexts of a schema, in the order they were made."""
        return [r for n, r in self.resources.items()
                if "/contexts/" in n and r.get("schemaTitle") == schema_title]

    def _store(self, name: str, body: Any, query: dict) -> tuple[int, Any]:
        if not name.endswith("/metadataStores/default"):
            return 404, _error(404, f"MetadataStore {name} not found", "NOT_FOUND")
        return 200, {"name": name, "createTime": _now(), "updateTime": _now()}

    def _create(self, collection: str, body: Any, query: dict) -> tuple[int, Any]:
        kind = {"contexts": "context", "artifacts": "artifact", "experiments":
                "tensorboardExperiment", "runs": "tensorboardRun", "timeSeries":
                "tensorboardTimeSeries"}[collection.rsplit("/", 1)[-1]]
        wanted = query.get(f"{kind}Id", [""])[0]
        if kind == "tensorboardTimeSeries":  # named by the service
            wanted = wanted or str(1000 + len(self.resources))
        if not ID.fullmatch(wanted):
            return 400, _error(400, f"{kind}_id {wanted!r} must match "
                                    "[a-z0-9][a-z0-9-]{0,127}", "INVALID_ARGUMENT")
        if "/tensorboards/" in collection and not self._tensorboard_of(collection):
            return 404, _error(404, f"Tensorboard of {collection} not found", "NOT_FOUND")
        name = f"{collection}/{wanted}"
        if name in self.resources:
            return 409, _error(409, f"{name} already exists", "ALREADY_EXISTS")
        self.resources[name] = {**(body or {}), "name": name, "createTime": _now(),
                                "updateTime": _now(), "etag": "1"}
        return 200, self.resources[name]

    def _get(self, name: str, body: Any, query: dict) -> tuple[int, Any]:
        if name not in self.resources:
            return 404, _error(404, f"{name} not found", "NOT_FOUND")
        return 200, self.resources[name]

    def _update(self, name: str, body: Any, query: dict) -> tuple[int, Any]:
        if name not in self.resources:
            return 404, _error(404, f"{name} not found", "NOT_FOUND")
        kept = self.resources[name]
        self.resources[name] = {**kept, **(body or {}), "name": name,
                                "createTime": kept["createTime"], "updateTime": _now(),
                                "etag": str(int(kept.get("etag", "1")) + 1)}
        return 200, self.resources[name]

    def _list(self, collection: str, body: Any, query: dict) -> tuple[int, Any]:
        text = query.get("filter", [""])[0]
        schema = re.findall(r'schema_title\s*=\s*"([^"]+)"', text)
        parents = re.findall(r'parent_contexts\s*:\s*"([^"]+)"', text)
        prefix = f"{collection}/"
        found = [r for n, r in self.resources.items() if n.startswith(prefix)
                 and "/" not in n[len(prefix):]
                 and (not schema or r.get("schemaTitle") in schema)
                 and all(p in r.get("parentContexts", []) for p in parents)]
        key = {"contexts": "contexts", "artifacts": "artifacts", "executions": "executions",
               "timeSeries": "tensorboardTimeSeries"}[collection.rsplit("/", 1)[-1]]
        return 200, {key: found}

    def _add_children(self, name: str, body: Any, query: dict) -> tuple[int, Any]:
        if name not in self.resources:
            return 404, _error(404, f"{name} not found", "NOT_FOUND")
        children = (body or {}).get("childContexts", [])
        missing = [c for c in children if c not in self.resources]
        if missing:
            return 404, _error(404, f"child contexts not found: {missing}", "NOT_FOUND")
        for child in children:
            held = self.resources[child].setdefault("parentContexts", [])
            if name not in held:
                held.append(name)
        return 200, {}

    def _add_artifacts(self, name: str, body: Any, query: dict) -> tuple[int, Any]:
        if name not in self.resources:
            return 404, _error(404, f"{name} not found", "NOT_FOUND")
        added = (body or {}).get("artifacts", []) + (body or {}).get("executions", [])
        missing = [a for a in added if a not in self.resources]
        if missing:
            return 404, _error(404, f"not found: {missing}", "NOT_FOUND")
        self.resources[name].setdefault("attributions", []).extend(added)
        return 200, {}

    def _tensorboard_of(self, name: str) -> str | None:
        found = re.match(r"(projects/[^/]+/locations/[^/]+/tensorboards/[^/]+)", name)
        board = found.group(1) if found else ""
        return board if board in self.tensorboards else None

    def _tensorboard(self, name: str, body: Any, query: dict) -> tuple[int, Any]:
        if name not in self.tensorboards:
            return 404, _error(404, f"Tensorboard {name} not found", "NOT_FOUND")
        return 200, {"name": name, "displayName": name.rsplit("/", 1)[-1],
                     "createTime": _now(), "updateTime": _now()}

    def _write(self, run: str, body: Any, query: dict) -> tuple[int, Any]:
        if run not in self.resources:
            return 404, _error(404, f"{run} not found", "NOT_FOUND")
        for data in (body or {}).get("timeSeriesData", []):
            series = self.resources.get(f"{run}/timeSeries/{data['tensorboardTimeSeriesId']}")
            if series is None:
                return 404, _error(404, "time series not found", "NOT_FOUND")
            for point in data.get("values", []):
                self.points.setdefault((run, series.get("displayName", "")), []).append(
                    (int(point.get("step", 0)), float(point["scalar"]["value"])))
        return 200, {}
