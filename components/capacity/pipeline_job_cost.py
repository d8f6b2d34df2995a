"""What the run's PipelineJob tells of its cost (GetPipelineJob, REST field names): its
own steps, each a CustomJob on a step machine, and the jobs its steps ran outside Vertex AI
as they recorded them in their outputs' metadata (the dataset stage's Dataflow job, the
build stage's Cloud Build build)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from components.capacity.cost_item import Item, seconds_of
from components.prices.price_list import price_of

#: The machine Vertex AI Pipelines runs a step on (docs, "Specify the machine configuration
#: for a pipeline step": "By default, the component will run on as a Vertex AI CustomJob
#: using an e2-standard-4 machine"); the steps given `vertex.component_cpu` and
#: `component_memory` run on a machine Vertex AI picks for those, priced as this one. Its
#: price is its 4 vCPUs and 16 GB at Vertex AI's E2 core and RAM prices.
STEP_MACHINE = "e2-standard-4"


def step_items(pipeline_job: Mapping[str, Any], prices: Mapping[str, float],
               machine_of: Callable[[str], str] | None = None) -> list[Item]:
    """The pipeline's own steps (the run's PipelineJob, REST field names): every container
    task that ended, from its start to its end, on the machine of the CustomJob it ran as
    (`machine_of(its containerDetail.mainJob)`: "" when it cannot be read), else
    STEP_MACHINE, at its training price."""
    steps = [t for t in pipeline_job.get("jobDetail", {}).get("taskDetails", [])
             if "containerDetail" in t.get("executorDetail", {}) and t.get("startTime")]
    if not steps:
        return []
    ended = [t for t in steps if t.get("endTime")]
    hours: dict[str, float] = {}
    read = 0
    for step in ended:
        job = str(step["executorDetail"]["containerDetail"].get("mainJob") or "")
        machine = machine_of(job) if machine_of and job else ""
        read += bool(machine)
        machine = machine or STEP_MACHINE
        hours[machine] = hours.get(machine, 0.0) + seconds_of(step) / 3600
    rates = {machine: price_of(prices, machine).usd for machine in hours}
    running = len(steps) - len(ended)
    return [Item("pipeline steps", str(pipeline_job.get("name", "")),
                 round(sum((rates[m] or 0.0) * h for m, h in hours.items()), 4),
                 round(sum(hours.values()), 4),
                 f"{len(ended)} step(s) on {', '.join(hours)} machines"
                 + ("" if read == len(ended) else
                    f" ({len(ended) - read} on {STEP_MACHINE}, Vertex AI Pipelines' default: "
                    "their jobs were not read)")
                 + ", each from its start to its end"
                 + (f"; {running} still running (the step reading the run among them), not "
                    "counted" if running else ""),
                 [m for m, rate in rates.items() if rate is None])]


#: What Dataflow bills a batch job's workers by: `vertex.prices`' key (USD per unit-hour)
#: of each total of the stage's usage record (`components.dataset.dataflow.job_usage`).
DATAFLOW_PRICES = {"vcpu_hours": "DATAFLOW:VCPU", "memory_gb_hours": "DATAFLOW:MEMORY_GB",
                   "disk_gb_hours": "DATAFLOW:DISK_GB", "ssd_gb_hours": "DATAFLOW:SSD_GB"}


def dataflow_items(pipeline_job: Mapping[str, Any], prices: Mapping[str, float]
                   ) -> list[Item]:
    """Each Dataflow job a step's output records (its `dataflow_job` metadata), its vCPU,
    memory and disk hours at `DATAFLOW:` prices."""
    return [_dataflow_item(usage, prices) for usage in recorded(pipeline_job, "dataflow_job")]


def build_items(pipeline_job: Mapping[str, Any], prices: Mapping[str, float]) -> list[Item]:
    """Each Cloud Build build a step made (the build stage's `cloud_build` metadata, when it
    built missing images), for its minutes at a `CLOUD_BUILD:<machine or pool>` price (USD
    an hour of build: Cloud Build has a price list of its own)."""
    found = []
    for build in recorded(pipeline_job, "cloud_build"):
        machine = str(build.get("machine", ""))
        hours = seconds_of({"startTime": build.get("start_time"),
                            "endTime": build.get("finish_time")}) / 3600
        rate = price_of(prices, f"CLOUD_BUILD:{machine}").usd
        found.append(Item("cloud build", f"Cloud Build {build.get('id', '')}",
                          round((rate or 0.0) * hours, 4), round(hours, 4),
                          f"{hours * 60:.1f} build-minute(s) on {machine}",
                          [] if rate is not None else [f"CLOUD_BUILD:{machine}"]))
    return found


def recorded(pipeline_job: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """What the run's steps recorded under `key` in their output artifacts' metadata."""
    return [artifact["metadata"][key]
            for task in pipeline_job.get("jobDetail", {}).get("taskDetails", [])
            for output in task.get("outputs", {}).values()
            for artifact in output.get("artifacts", [])
            if isinstance(artifact.get("metadata", {}).get(key), dict)]


def _dataflow_item(usage: Mapping[str, Any], prices: Mapping[str, float]) -> Item:
    name = f"Dataflow job {usage.get('job', '')} ({usage.get('region', '')})"
    if "unread" in usage:
        return Item("dataflow", name, 0.0, 0.0, "not counted: what it used could not be "
                    f"read ({usage['unread']})")
    used = {key: float(usage.get(key) or 0.0) for key in DATAFLOW_PRICES}
    rates = {key: price_of(prices, DATAFLOW_PRICES[key]).usd for key in DATAFLOW_PRICES}
    missing = [DATAFLOW_PRICES[key] for key, amount in used.items()
               if amount and rates[key] is None]
    hours = seconds_of({"startTime": usage.get("start_time"), "endTime": usage.get("end_time")})
    return Item("dataflow", name, round(sum(amount * (rates[key] or 0.0)
                                            for key, amount in used.items()), 4),
                round(hours / 3600, 4),
                f"{used['vcpu_hours']:.3f} vCPU-hours, {used['memory_gb_hours']:.3f} GB-hours "
                f"of memory, {used['disk_gb_hours'] + used['ssd_gb_hours']:.3f} GB-hours of "
                f"disk on {usage.get('machine_type', '')} workers, as the job reported them",
                missing)


def job_machines(jobs_for: Callable[[str], Any]) -> Callable[[str], str]:
    """`step_items`' `machine_of`: a step's CustomJob read (GetCustomJob in its region,
    `jobs_for(region)`: a JobServiceClient) for its first pool's machine type; "" when it
    cannot be read (the step is then priced as STEP_MACHINE, and said)."""
    from components.capacity.cost import region_of
    from trainer.common.cloud_calls import remote_call
    from trainer.common.errors import ProjectError

    clients: dict[str, Any] = {}

    def machine_of(name: str) -> str:
        region = region_of(name)
        try:
            with remote_call(f"reading the step's job {name}"):
                if region not in clients:
                    clients[region] = jobs_for(region)
                job = clients[region].get_custom_job(name=name)
        except ProjectError:
            return ""
        pools = list(job.job_spec.worker_pool_specs)
        return pools[0].machine_spec.machine_type if pools else ""
    return machine_of


def read_pipeline_job(name: str, client: Any) -> dict[str, Any]:
    """The run's PipelineJob (REST field names; GetPipelineJob has its tasks' details).

    Raises:
        CloudCallError: The read failed.
    """
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    from trainer.common.cloud_calls import remote_call

    with remote_call(f"reading the pipeline run {name}"):
        job = client.get_pipeline_job(request=aiplatform_v1.GetPipelineJobRequest(name=name))
    return json_format.MessageToDict(type(job).pb(job))


def pipelines_client(region: str) -> Any:
    """A Vertex AI PipelineServiceClient of a region's endpoint."""
    from google.cloud import aiplatform_v1

    from components.cloud_names import vertex_endpoint

    return aiplatform_v1.PipelineServiceClient(
        client_options={"api_endpoint": vertex_endpoint(region)})
