"""Vertex AI's endpoint service and Cloud Monitoring's time series, faked with their rules.

Endpoints (REST reference, projects.locations.endpoints): create (its operation done at
once), get, list (`display_name="..."` filters), deployModel, undeployModel, patch
(`updateMask=traffic_split`, or `labels`, checked as Vertex AI checks them), predict (the
deployed model the traffic split picks answers with the project's predictor on its
artifacts, as the serving container would). Refused
as Vertex AI refuses them (400 INVALID_ARGUMENT, or FAILED_PRECONDITION): a traffic split
whose values do not add up to 100, or that names an ID the endpoint does not hold (`"0"`
is the model being deployed, and only in deployModel); a model or version the registry
does not hold; a custom model deployed without dedicated resources; undeploying a model
that still has traffic after the request's split; predict on an endpoint that gives no
deployed model traffic. The deployed IDs are assigned here, as Vertex AI assigns them.

Monitoring (`projects.timeSeries.list`, on gRPC as google-cloud-monitoring's client speaks
it, at `monitoring_address`; its REST route too): the series of `prediction/online/response_count`,
`error_count` and `prediction_latencies` per deployed model, made from what a test says
each model version does (`behaviour[model@version]`: requests per minute, error rate,
p95 in ms) over the minutes it has been deployed; `elapsed` adds fake minutes; the training
jobs' accelerator series (`training_series`). It refuses what Cloud Monitoring refuses: no
interval end, a filter that does not name exactly one metric type, an alignment period
under 60 s, a percentile aligner on a metric that is not a distribution.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from typing import Any

from tests.support.vertex_emulator.apis import _error
from tests.support.vertex_emulator.training_series import PREFIX as TRAINING
from tests.support.vertex_emulator.training_series import training_series

DISTRIBUTIONS = {"prediction_latencies"}
COUNTS = {"response_count", "error_count"}


@dataclasses.dataclass
class Behaviour:
    """What a deployed model version does: per minute deployed."""

    requests_per_minute: int = 100
    error_rate: float = 0.0
    p95_ms: float = 40.0


class EndpointService:
    """The fake endpoints; `models` is the fake registry's list (model, version, ...)."""

    def __init__(self, models: list[dict[str, Any]]):
        self.models = models
        self.endpoints: dict[str, dict[str, Any]] = {}
        self.deployed_at: dict[tuple[str, str], float] = {}  # (endpoint, id) -> when
        self.behaviour: dict[str, Behaviour] = {}  # "projects/../models/ID@V" -> what it does
        self.elapsed = 0.0  # fake seconds added to every deployed model's time
        self.undeployed: list[dict[str, Any]] = []
        self._ids = 1000
        self._served = 0  # predictions requests so far: which deployed model is next
        # PSC endpoints (forwarding rules) a test made: "host:port" -> the endpoint they
        # reach; a request arriving with that Host header came through it.
        self.psc_addresses: dict[str, str] = {}
        self.request_host: Any = lambda: ""  # the Host header of the request being served
        self._predictors: dict[str, Any] = {}  # model@version -> the loaded predictor
        self._lock = threading.Lock()
        # Cloud Monitoring's training series (`training_series`): the CustomJobs, and what
        # each replica's accelerators do (task name -> utilisation, memory; 0 to 1).
        self.training_jobs: dict[str, Any] = {}
        self.accelerator_use: dict[str, tuple[float, float]] = {}

    def start_monitoring(self, record: Any) -> str:
        """Serves ListTimeSeries on gRPC on loopback (the Python client has no REST
        transport); `record(query)` is told of each request. Returns the address."""
        from concurrent import futures

        import grpc
        from google.cloud import monitoring_v3

        def list_time_series(request: Any, context: Any) -> Any:
            aggregation = request.aggregation
            query = {"filter": [request.filter],
                     "interval.endTime": [request.interval.end_time.rfc3339()]
                     if request.interval.end_time else [],
                     "interval.startTime": [request.interval.start_time.rfc3339()]
                     if request.interval.start_time else [],
                     "aggregation.alignmentPeriod": [
                         f"{aggregation.alignment_period.total_seconds():g}s"],
                     "aggregation.perSeriesAligner": [
                         "" if not aggregation.per_series_aligner
                         else aggregation.per_series_aligner.name]}
            record(request.name, query)
            status, answer = self._time_series(request.name, None, query)
            if status != 200:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, answer["error"]["message"])
            return monitoring_v3.ListTimeSeriesResponse.from_json(
                json.dumps(answer), ignore_unknown_fields=True)

        handler = grpc.method_handlers_generic_handler("google.monitoring.v3.MetricService", {
            "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                list_time_series,
                request_deserializer=monitoring_v3.ListTimeSeriesRequest.deserialize,
                response_serializer=monitoring_v3.ListTimeSeriesResponse.serialize)})
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._grpc.add_generic_rpc_handlers((handler,))
        port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        return f"127.0.0.1:{port}"

    def stop(self) -> None:
        if getattr(self, "_grpc", None) is not None:
            self._grpc.stop(grace=None)

    def routes(self) -> list[tuple[str, str, Any]]:
        base = r"^/v1/(projects/[^/]+/locations/[^/]+"
        return [
            ("POST", base + r")/endpoints$", self._create),
            ("GET", base + r")/endpoints$", self._list),
            ("GET", base + r"/endpoints/[0-9]+)$", self._get),
            ("PATCH", base + r"/endpoints/[0-9]+)$", self._patch),
            ("POST", base + r"/endpoints/[0-9]+):deployModel$", self._deploy),
            ("POST", base + r"/endpoints/[0-9]+):undeployModel$", self._undeploy),
            ("POST", base + r"/endpoints/[0-9]+):predict$", self._predict),
            ("GET", r"^/v3/(projects/[^/]+)/timeSeries$", self._time_series),
        ]

    def add(self, parent: str, display_name: str) -> str:
        """An endpoint made before the run (as a user would have)."""
        with self._lock:
            self._ids += 1
            name = f"{parent}/endpoints/{self._ids}"
            self.endpoints[name] = {"name": name, "displayName": display_name,
                                    "deployedModels": [], "trafficSplit": {}}
        return name

    def serve(self, name: str, model: str, machine_type: str = "n1-standard-4") -> str:
        """Deploys `model` (`.../models/ID@VERSION`) with all the traffic of endpoint
        `name` (as a user would have); returns its deployed ID."""
        status, answer = self._deploy(name, {
            "deployedModel": {"model": model, "dedicatedResources": {
                "machineSpec": {"machineType": machine_type}, "minReplicaCount": 1}},
            "trafficSplit": {"0": 100}})
        assert status == 200, answer
        return answer["response"]["deployedModel"]["id"]

    def _create(self, parent: str, body: dict[str, Any], query: Any = None) -> tuple[int, Any]:
        psc = body.get("privateServiceConnectConfig", {})
        if psc.get("enablePrivateServiceConnect") and body.get("network"):
            return 400, _error(400, "network and private_service_connect_config cannot be set "
                                    "together")
        name = self.add(parent, body.get("displayName", ""))
        if body.get("encryptionSpec"):  # kept, as Vertex AI keeps it on the resource
            self.endpoints[name]["encryptionSpec"] = body["encryptionSpec"]
        if psc.get("enablePrivateServiceConnect"):  # with its service attachment (output)
            region = parent.split("/")[3]
            self.endpoints[name]["privateServiceConnectConfig"] = {
                **psc, "serviceAttachment": f"projects/tenant-{name.rsplit('/', 1)[1]}/regions/"
                                            f"{region}/serviceAttachments/endpoint-attachment"}
        return 200, {"name": f"{name}/operations/create", "done": True, "response": {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.Endpoint",
            **self.endpoints[name]}}

    def _list(self, parent: str, body: Any, query: Any = None) -> tuple[int, Any]:
        wanted = re.fullmatch(r'display_name="([^"]*)"', (query or {}).get("filter", [""])[0])
        found = [e for n, e in self.endpoints.items() if n.startswith(parent + "/")
                 and (wanted is None or e["displayName"] == wanted.group(1))]
        return 200, {"endpoints": found}

    def _get(self, name: str, body: Any, query: Any = None) -> tuple[int, Any]:
        if name not in self.endpoints:
            return 404, _error(404, f"Endpoint {name} not found")
        return 200, self.endpoints[name]

    def _split_problem(self, endpoint: dict[str, Any], split: dict[str, Any],
                       new: bool) -> str | None:
        known = {d["id"] for d in endpoint["deployedModels"]} | ({"0"} if new else set())
        unknown = sorted(set(split) - known)
        if unknown:
            return (f"traffic_split names {unknown}, which are not deployed models of "
                    f"{endpoint['name']}" + ('; "0" means the model being deployed, in '
                                             "DeployModel only" if "0" in unknown else ""))
        if split and sum(int(v) for v in split.values()) != 100:
            return f"The traffic split values must add up to 100, got {split}"
        return None

    def _deploy(self, name: str, body: dict[str, Any], query: Any = None) -> tuple[int, Any]:
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return 404, _error(404, f"Endpoint {name} not found")
        deployed = dict(body.get("deployedModel") or {})
        model, _, version = deployed.get("model", "").partition("@")
        if not any(m["model"] == model and m["version"] == (version or m["version"])
                   for m in self.models):
            return 404, _error(404, f"Model {deployed.get('model')} not found")
        resources = deployed.get("dedicatedResources") or {}
        if not (resources.get("machineSpec") or {}).get("machineType"):
            return 400, _error(400, "Model requires dedicated_resources with a machine_spec "
                                    "(a custom-trained model has no automatic resources)")
        split = {k: int(v) for k, v in (body.get("trafficSplit") or {}).items()}
        problem = self._split_problem(endpoint, split, new=True)
        if problem:
            return 400, _error(400, problem)
        with self._lock:
            self._ids += 1
            deployed_id = str(self._ids)
            version = version or max(m["version"] for m in self.models if m["model"] == model)
            deployed.update(id=deployed_id, model=model, modelVersionId=version)
            endpoint["deployedModels"].append(deployed)
            if split:
                endpoint["trafficSplit"] = {(deployed_id if k == "0" else k): v
                                            for k, v in split.items()}
            self.deployed_at[(name, deployed_id)] = time.time()
        return 200, {"name": f"{name}/operations/deploy-{deployed_id}", "done": True,
                     "response": {"@type": "type.googleapis.com/google.cloud.aiplatform.v1."
                                           "DeployModelResponse", "deployedModel": deployed}}

    def _undeploy(self, name: str, body: dict[str, Any], query: Any = None) -> tuple[int, Any]:
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return 404, _error(404, f"Endpoint {name} not found")
        deployed_id = body.get("deployedModelId", "")
        found = [d for d in endpoint["deployedModels"] if d["id"] == deployed_id]
        if not found:
            return 404, _error(404, f"DeployedModel {deployed_id} not found in {name}")
        split = {k: int(v) for k, v in (body.get("trafficSplit") or {}).items()}
        last = len(endpoint["deployedModels"]) == 1
        problem = None if last else self._split_problem(endpoint, split, new=False)
        if problem:
            return 400, _error(400, problem)
        after = split or endpoint["trafficSplit"]
        if not last and int(after.get(deployed_id, 0)) > 0:
            return 400, _error(400, f"DeployedModel {deployed_id} still has "
                                    f"{after[deployed_id]}% of the traffic of {name}; give it "
                                    "to other deployed models in the request's traffic_split")
        with self._lock:
            endpoint["deployedModels"].remove(found[0])
            endpoint["trafficSplit"] = {} if last else \
                {k: v for k, v in after.items() if k != deployed_id}
            self.undeployed.append(found[0])
        return 200, {"name": f"{name}/operations/undeploy-{deployed_id}", "done": True,
                     "response": {"@type": "type.googleapis.com/google.cloud.aiplatform.v1."
                                           "UndeployModelResponse"}}

    def _patch(self, name: str, body: dict[str, Any], query: Any = None) -> tuple[int, Any]:
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return 404, _error(404, f"Endpoint {name} not found")
        mask = (query or {}).get("updateMask", [""])[0]
        if mask == "labels":
            labels = dict(body.get("labels") or {})
            problem = next(filter(None, map(_label_problem, labels.items())), None)
            if problem:
                return 400, _error(400, problem)
            endpoint["labels"] = labels
            return 200, endpoint
        if "trafficSplit" not in mask and "traffic_split" not in mask:
            return 400, _error(400, f"update_mask {mask!r} changes nothing this fake knows")
        split = {k: int(v) for k, v in (body.get("trafficSplit") or {}).items()}
        problem = self._split_problem(endpoint, split, new=False)
        if problem:
            return 400, _error(400, problem)
        endpoint["trafficSplit"] = split
        return 200, endpoint

    def _predict(self, name: str, body: dict[str, Any], query: Any = None) -> tuple[int, Any]:
        """The serving container's answer (`trainer.serving.app`'s predictor on the model's
        artifacts) from the deployed model the traffic split picks, named in the response
        as Vertex AI names it."""
        from fastapi import HTTPException

        endpoint = self.endpoints.get(name)
        reached = self.psc_addresses.get(self.request_host())
        if endpoint is None or (reached is not None and reached != name):
            return 404, _error(404, f"Endpoint {name} not found")
        # A Private Service Connect endpoint answers only through a PSC endpoint (a
        # forwarding rule) that targets its service attachment, not on the public API host
        # (aiplatform's PrivateEndpoint.predict: https://ADDRESS/v1/...:predict).
        if endpoint.get("privateServiceConnectConfig", {}).get("enablePrivateServiceConnect") \
                and reached is None:
            return 400, _error(400, f"Endpoint {name} is a Private Service Connect endpoint: "
                                    "send requests to a PSC endpoint that targets its service "
                                    "attachment", "FAILED_PRECONDITION")
        split = {k: int(v) for k, v in endpoint["trafficSplit"].items() if int(v) > 0}
        if not split:
            return 400, _error(400, f"Endpoint {name} does not have any model deployed to it "
                                    "with traffic")
        with self._lock:
            turn, self._served = self._served % 100, self._served + 1
        shares = sorted(split.items())  # a weighted rotation
        while turn >= shares[0][1]:
            turn -= shares.pop(0)[1]
        deployed_id = shares[0][0]
        deployed = next(d for d in endpoint["deployedModels"] if d["id"] == deployed_id)
        predictor = self._predictor(deployed)
        try:
            answer = predictor.answer(body)
        except HTTPException as exc:  # the container's 400, passed on by the endpoint
            return 400, _error(400, str(exc.detail))
        return 200, {**answer, "deployedModelId": deployed_id, "model": deployed["model"],
                     "modelVersionId": deployed["modelVersionId"],
                     "modelDisplayName": deployed.get("displayName", "")}

    def _predictor(self, deployed: dict[str, Any]) -> Any:
        return self.predictor(f"{deployed['model']}@{deployed['modelVersionId']}")

    def predictor(self, key: str) -> Any:
        """The serving container's predictor of a model version (`.../models/ID@V`),
        loaded once from its artifacts."""
        from trainer.serving.app import SavedModelPredictor

        with self._lock:
            if key not in self._predictors:
                uploaded = next(m["request"]["model"] for m in self.models
                                if f"{m['model']}@{m['version']}" == key)
                predictor = SavedModelPredictor()
                predictor.load(uploaded.get("artifact_uri") or uploaded["artifactUri"])
                self._predictors[key] = predictor
            return self._predictors[key]

    # --- Cloud Monitoring ---------------------------------------------------------------

    def _time_series(self, project: str, body: Any, query: Any = None) -> tuple[int, Any]:
        query = query or {}
        text = query.get("filter", [""])[0]
        terms = dict(re.findall(r'([\w.]+)\s*=\s*"([^"]*)"', text))
        metric = terms.get("metric.type", "").rsplit("/", 1)[-1]
        aligner = query.get("aggregation.perSeriesAligner", [""])[0]
        period = query.get("aggregation.alignmentPeriod", ["0s"])[0]
        if not query.get("interval.endTime"):
            return 400, _error(400, "Field interval.endTime is required")
        if len(re.findall(r"metric\.type\s*=", text)) != 1:
            return 400, _error(400, f"Field filter had an invalid value of {text!r}: a "
                                    "filter must specify exactly one metric type")
        if terms.get("metric.type", "").startswith(TRAINING):
            return 200, {"timeSeries": training_series(self.training_jobs, terms, query,
                                                       self.accelerator_use)}
        if aligner and float(period.rstrip("s") or 0) < 60:
            return 400, _error(400, "The alignment period must be at least 60 seconds")
        if aligner.startswith("ALIGN_PERCENTILE") and metric not in DISTRIBUTIONS:
            return 400, _error(400, f"The aligner {aligner} applies to distribution metrics "
                                    f"only; {metric} is not one")
        endpoint = next((n for n in self.endpoints
                         if n.rsplit("/", 1)[-1] == terms.get("resource.labels.endpoint_id")),
                        None)
        wanted = terms.get("metric.labels.deployed_model_id")
        series = []
        for deployed in (self.endpoints[endpoint]["deployedModels"] if endpoint else []):
            if wanted not in (None, deployed["id"]):
                continue
            since = self.deployed_at.get((endpoint, deployed["id"]), time.time())
            minutes = (time.time() - since + self.elapsed) / 60
            does = self.behaviour.get(f"{deployed['model']}@{deployed['modelVersionId']}",
                                      Behaviour())
            requests = int(does.requests_per_minute * minutes)
            value: dict[str, Any]
            if metric == "response_count":
                value = {"int64Value": str(requests)}
            elif metric == "error_count":
                value = {"int64Value": str(round(requests * does.error_rate))}
            elif metric in DISTRIBUTIONS and aligner.startswith("ALIGN_PERCENTILE") and requests:
                value = {"doubleValue": does.p95_ms}
            else:
                continue
            series.append({"metric": {"type": terms.get("metric.type"),
                                      "labels": {"deployed_model_id": deployed["id"]}},
                           "resource": {"type": "aiplatform.googleapis.com/Endpoint",
                                        "labels": {"endpoint_id": endpoint.rsplit("/", 1)[-1]}},
                           "points": [{"interval": {"endTime": query["interval.endTime"][0]},
                                       "value": value}]})
        return 200, {"timeSeries": series}


def _label_problem(item: tuple[str, str]) -> str | None:
    """Why Vertex AI refuses a label (Endpoint.labels: "Label keys and values can be no
    longer than 64 characters (Unicode codepoints), can only contain lowercase letters,
    numeric characters, underscores and dashes. International characters are allowed";
    keys start with a letter), or None."""
    key, value = item
    if not re.fullmatch(r"[^\W\d_][\w-]{0,63}", key) or \
            not re.fullmatch(r"[\w-]{0,64}", value) or f"{key}{value}".lower() != key + value:
        return f"Invalid label {key!r}: {value!r}"
    return None
