"""What a whole run cost on Vertex AI, resource by resource: the run's exit handler finds
what the run created by the label Vertex AI Pipelines gives every resource of a run
(`vertex-ai-pipelines-run-billing-id`: gcpc's launchers and the training step put the run's
labels on each job they create, `components.capacity.job_records`), prices each for the
time Vertex AI bills it, and names what it cannot see or price.

Itemised, from each resource as Vertex AI returns it:

- every training CustomJob of the run in each alternative's region (`cost.job_cost`:
  start to end, billed if it succeeded or was cancelled);
- every HyperparameterTuningJob's trials (`cost.tuning_cost`: each trial's start to end on
  the trials' pools, a failed or infeasible trial unbilled);
- every BatchPredictionJob: its machines, at `max_replica_count` (it scales between the
  starting and the maximum count; the most it may have run, an upper bound) from start to
  end, at a `PREDICTION:<type>` price from `vertex.prices` (prediction has price lists of
  its own, which the table does not hold);
- the canary of each model version the run registered (ListModels, or ListModelVersions
  of `vertex.parent_model`, by the label; its rollout in `decision.json` beside it): its
  nodes from the canary's deployment to its promotion or roll-back, and, once promoted,
  the old model kept at 0% for `deploy.grace_period` (until the next rollout undeploys it:
  at least that long), both on the deploy rule's machines (`max_replica_count` of them) at
  `PREDICTION:` prices;
- what the run's PipelineJob tells (GetPipelineJob, `pipeline_job_cost`): its own steps
  on their step machines; the dataset stage's Dataflow job and the build stage's Cloud
  Build build, as those stages recorded them, at `DATAFLOW:` and `CLOUD_BUILD:` prices
  from `vertex.prices` (price lists of their own, which the table does not hold);
- the pipeline run itself: 0.03 USD a run (Vertex AI's tabular workflows pricing page,
  its cost examples: "Vertex AI Pipelines | 1 run x $0.03").

Named as not counted, with why: the champion's own nodes (they serve anyway), the builds
`submit` makes before the run, disks, network, storage and logging.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from components.capacity.cost import BILLED, job_cost, rate, region_of, tuning_cost
from components.capacity.cost_item import Item, seconds_of
from components.capacity.pipeline_job_cost import (
    build_items,
    dataflow_items,
    job_machines,
    pipelines_client,
    read_pipeline_job,
    step_items,
)
from components.gpu.worker_pool import WorkerPool
from components.prices.price_list import PriceBook, unpriced_words

if TYPE_CHECKING:
    from components.vertex_options import VertexOptions

PIPELINE_RUN_USD = 0.03
PIPELINE_RUN_SOURCE = ("https://cloud.google.com/vertex-ai/docs/tabular-data/tabular-workflows/"
                       "pricing (cost examples: Vertex AI Pipelines, 1 run x $0.03)")
NOT_COUNTED = ("the champion's own serving nodes (they serve anyway)",
               "the Cloud Build builds `submit` makes before the run (only when the images' "
               "content changed; the build stage's own are counted)",
               "disks, network, storage and logging")


def training_items(jobs: Iterable[Mapping[str, Any]], book: PriceBook) -> list[Item]:
    """Each training CustomJob (REST field names), at its region's prices."""
    found = []
    for job in jobs:
        cost = job_cost(job, book)
        found.append(Item("training", cost.job, cost.usd, round(cost.seconds / 3600, 4),
                          f"{cost.state.replace('JOB_STATE_', '').lower()}"
                          + ("" if cost.billed else ", not billed"), cost.unpriced))
    return found


def tuning_items(studies: Iterable[Mapping[str, Any]], book: PriceBook) -> list[Item]:
    """Each HyperparameterTuningJob's trials, on the trials' pools, at its region's prices."""
    from components.gpu.worker_pool import parse_pools

    found = []
    for study in studies:
        pools = parse_pools(study.get("trialJobSpec", {}).get("workerPoolSpecs", []))
        trials = [{"state": str(t.get("state", "")), "seconds": seconds_of(t)}
                  for t in study.get("trials", [])]
        prices = book.region(region_of(str(study.get("name", "")), book.default_region))
        strategy = str(((study.get("trialJobSpec") or {}).get("scheduling") or {})
                       .get("strategy") or "")
        cost = tuning_cost(trials, pools, prices, strategy)
        found.append(Item("tuning", str(study.get("name", "")), cost["usd"],
                          round(cost["seconds"] / 3600, 4),
                          f"{cost['billed_trials']} billed trial(s) of {cost['trials']}",
                          list(cost["unpriced"])))
    return found


def batch_items(jobs: Iterable[Mapping[str, Any]], book: PriceBook) -> list[Item]:
    """Each BatchPredictionJob, at its maximum replica count for its whole time, at its
    region's prediction prices."""
    found = []
    for job in jobs:
        resources = job.get("dedicatedResources", {})
        spec = resources.get("machineSpec", {})
        nodes = int(resources.get("maxReplicaCount") or resources.get("startingReplicaCount")
                    or 1)
        pool = WorkerPool(role=0, machine=str(spec.get("machineType", "")),
                          replicas=nodes, accelerator=str(spec.get("acceleratorType", "") or ""),
                          gpus_per_machine=int(spec.get("acceleratorCount") or 0))
        name = str(job.get("name", ""))
        found_rate = rate([pool], book.region(region_of(name, book.default_region)),
                          "PREDICTION")
        seconds = seconds_of(job)
        found.append(Item("batch prediction", name,
                          round(found_rate.usd * seconds / 3600, 4)
                          if job.get("state") in BILLED else 0.0,
                          round(seconds / 3600, 4),
                          f"{nodes} x {pool.machine} node(s), the most it may have run",
                          [f"PREDICTION:{kind}" for kind in found_rate.unpriced]))
    return found


def rollout_items(rollouts: Iterable[tuple[str, Mapping[str, Any]]], nodes: WorkerPool,
                  prices: Mapping[str, float]) -> list[Item]:
    """Each rollout's canary (from its deployment to its promotion or roll-back) and the
    old model a promotion kept at 0% (until its grace period ends), on `nodes` (the
    deploy rule's machines)."""
    from components.durations import timestamp_seconds

    found_rate = rate([nodes], prices, "PREDICTION")
    usd_per_hour, missing = found_rate.usd, [f"PREDICTION:{k}" for k in found_rate.unpriced]
    each = f"{nodes.replicas} x {nodes.machine} node(s)"
    found = []
    for model, rollout in rollouts:
        at = {s["step"]: s for s in rollout.get("steps", []) if s.get("at")}
        ended = next((name for name in ("promoted", "rolled back") if name in at), "")
        if "canary" not in at or not ended:
            continue
        start, end = (timestamp_seconds(at[name]["at"]) for name in ("canary", ended))
        hours = max(0.0, end - start) / 3600
        found.append(Item("canary", f"{model}'s canary", round(usd_per_hour * hours, 4),
                          round(hours, 4), f"{each} from its deployment until {ended}",
                          missing))
        kept = at.get("old model kept", {}).get("until")
        if ended == "promoted" and kept:
            hours = max(0.0, timestamp_seconds(kept) - end) / 3600
            found.append(Item("grace period", f"the old model beside {model}",
                              round(usd_per_hour * hours, 4), round(hours, 4),
                              f"{each} at 0% until {kept}, at least (the next rollout "
                              "undeploys it), on the deploy rule's machines", missing))
    return found


def itemise(*, training: Sequence[Mapping[str, Any]], studies: Sequence[Mapping[str, Any]],
            batch: Sequence[Mapping[str, Any]], book: PriceBook,
            rollouts: Sequence[tuple[str, Mapping[str, Any]]] = (),
            nodes: WorkerPool | None = None,
            pipeline_job: Mapping[str, Any] | None = None,
            machine_of: Callable[[str], str] | None = None) -> dict[str, Any]:
    """The run's `cost.json`: every item, the total of what was priced, and what is not
    (`rollouts`: (model, its rollout record) on `nodes`, the deploy rule's machines;
    `pipeline_job`: the run's PipelineJob, whose steps are billed too, each on its job's
    machine, `machine_of(job name)` (`pipeline_job_cost.step_items`)), each at its
    region's prices (`book`; the canary, steps and builds in `book.default_region`, the
    run's)."""
    prices = book.region(book.default_region)
    items = [*training_items(training, book), *tuning_items(studies, book),
             *batch_items(batch, book),
             *(rollout_items(rollouts, nodes, prices) if nodes is not None else []),
             *step_items(pipeline_job or {}, prices, machine_of),
             *dataflow_items(pipeline_job or {}, prices),
             *build_items(pipeline_job or {}, prices),
             Item("pipeline", "the pipeline run", PIPELINE_RUN_USD, 0.0, PIPELINE_RUN_SOURCE)]
    unpriced = sorted({kind for item in items for kind in item.unpriced})
    return {"usd": round(sum(item.usd for item in items), 4),
            "items": [dataclasses.asdict(item) for item in items],
            "by_kind": {kind: round(sum(i.usd for i in items if i.kind == kind), 4)
                        for kind in dict.fromkeys(i.kind for i in items)},
            "unpriced": unpriced, "not_counted": list(NOT_COUNTED),
            "prices_read": "; ".join(book.region(r).words() for r in book.read_regions())}


def line(cost: Mapping[str, Any]) -> str:
    """The run's cost in one line."""
    parts = ", ".join(f"{kind} {usd:.2f}" for kind, usd in cost["by_kind"].items())
    return (f"cost: about {cost['usd']:.2f} USD ({parts}; {cost['prices_read']})"
            + unpriced_words(cost["unpriced"])
            + f"; not counted: {'; '.join(cost['not_counted'])}")


def read_run(project: str, regions: Sequence[str], billing_id: str,
             jobs_for: Callable[[str], Any], models_for: Callable[[str], Any] | None = None,
             parent_model: str = "") -> dict[str, list[dict[str, Any]]]:
    """The run's CustomJobs, HyperparameterTuningJobs and BatchPredictionJobs in each of
    `regions`, and the models it registered in the first (REST field names), found by its
    billing label (`jobs_for(region)`: a JobServiceClient; `models_for(region)`: a
    ModelServiceClient, None: no models read). With `parent_model` (`vertex.parent_model`)
    the run's versions of it are read, whether or not they became the default
    (ListModelVersions; ListModels lists each model as its default version).

    Raises:
        CloudCallError: A listing failed.
    """
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    from components.capacity.job_records import BILLING_LABEL, earlier_jobs_filter
    from trainer.common.cloud_calls import remote_call

    found: dict[str, list[dict[str, Any]]] = {"training": [], "studies": [], "batch": [],
                                              "models": []}
    of_run = f'labels.{BILLING_LABEL}="{billing_id}"'
    for region in dict.fromkeys(regions):
        parent, client = f"projects/{project}/locations/{region}", jobs_for(region)
        for key, request, method, wanted in (
                ("training", aiplatform_v1.ListCustomJobsRequest, client.list_custom_jobs,
                 earlier_jobs_filter(billing_id)),  # the training step's, not a study's
                ("studies", aiplatform_v1.ListHyperparameterTuningJobsRequest,
                 client.list_hyperparameter_tuning_jobs, of_run),
                ("batch", aiplatform_v1.ListBatchPredictionJobsRequest,
                 client.list_batch_prediction_jobs, of_run)):
            with remote_call(f"listing the run's {key} jobs in {region}"):
                found[key] += [json_format.MessageToDict(type(r).pb(r))
                               for r in method(request=request(parent=parent, filter=wanted))]
    if models_for is not None and regions:
        client = models_for(regions[0])
        with remote_call(f"listing the run's models in {regions[0]}"):
            listed = (client.list_model_versions(
                request=aiplatform_v1.ListModelVersionsRequest(name=parent_model,
                                                               filter=of_run))
                if parent_model else client.list_models(
                    request=aiplatform_v1.ListModelsRequest(
                        parent=f"projects/{project}/locations/{regions[0]}", filter=of_run)))
            found["models"] = [json_format.MessageToDict(type(m).pb(m)) for m in listed]
    return found


def rollouts_of(models: Iterable[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(model, its rollout) of each model whose `decision.json` (beside its artifacts, on
    the Cloud Storage mount) records one."""
    from trainer.common import files
    from trainer.common.gcs import to_mount_path

    found = []
    for model in models:
        uri = str(model.get("artifactUri", "")).rstrip("/")
        decision = files.read_json(to_mount_path(f"{uri}/decision.json"), missing={}) \
            if uri else {}
        if decision.get("rollout"):
            found.append((f"{model.get('name', '')}@{model.get('versionId', '1')}",
                          decision["rollout"]))
    return found


def models_client(region: str) -> Any:
    """A Vertex AI ModelServiceClient of a region's endpoint, with the default credentials."""
    from google.cloud import aiplatform_v1

    from components.cloud_names import vertex_endpoint

    return aiplatform_v1.ModelServiceClient(
        client_options={"api_endpoint": vertex_endpoint(region)})


def of_run(project: str, vertex: VertexOptions, pipeline_job: str = "",
           book: PriceBook | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the run's itemised cost so far, its line; or None and why not), read from Vertex AI
    in the run's regions by the run's billing label (`VERTEX_AI_PIPELINES_RUN_LABELS`), and
    its steps from `pipeline_job` (the run's resource name); what cannot be read is said,
    never raised."""
    from components.capacity.job_records import BILLING_LABEL, run_labels
    from components.capacity.vertex_launch import jobs_client
    from trainer.common.errors import ProjectError

    billing = run_labels().get(BILLING_LABEL, "")
    if not billing:
        return None, f"not estimated (the run's {BILLING_LABEL} label is not set)"
    regions = [vertex.region, *(f.region for f in vertex.fallbacks if f.region)]
    try:
        found = read_run(project, regions, billing, jobs_client, models_client,
                         vertex.parent_model)
        rollouts = rollouts_of(found.pop("models"))
        run = read_pipeline_job(pipeline_job, pipelines_client(vertex.region)) \
            if pipeline_job else None
    except (ProjectError, OSError, ValueError) as exc:
        return None, f"not estimated ({exc})"
    cost = itemise(**found, book=book or PriceBook.of(vertex), rollouts=rollouts,
                   nodes=vertex.deploy.nodes(), pipeline_job=run,
                   machine_of=job_machines(jobs_client))
    return cost, line(cost).removeprefix("cost: ")


def before_training(project: str, vertex: VertexOptions, pipeline_job: str,
                    log: Callable[[str], None]) -> float:
    """What the run has cost so far besides its training step's jobs (its study's trials,
    its steps, its Dataflow job and build, the run itself), for the training step to hold
    its job to what `vertex.budget_usd` leaves: 0 without a budget, and 0, said, when it
    cannot be read (the job is then held to the whole budget)."""
    if vertex.budget_usd <= 0:
        return 0.0
    cost, said = of_run(project, vertex, pipeline_job)
    if cost is None:
        log(f"budget: what the run has cost before training is {said}; its job is held to "
            "the whole budget")
        return 0.0
    return round(cost["usd"] - cost["by_kind"].get("training", 0.0), 4)
