"""The Vertex AI custom-training quota a configuration needs, and what the project has.

Vertex AI counts custom-training GPUs per region and GPU type, in quotas named
`aiplatform.googleapis.com/custom_model_training_<gpu>_gpus`; Spot VMs and the Dynamic
Workload Scheduler (FLEX_START) count against the preemptible ones,
`custom_model_training_preemptible_<gpu>_gpus` (Vertex AI docs: "Schedule training jobs
based on resource availability", Quota: DWS uses preemptible quota and is billed at
on-demand prices). Every machine's vCPUs count against a CPU quota as well, GPU machines'
included: `custom_model_training_cpus` for N1 and E2 (users' 429s for n1-standard-4 with a
T4 name it beside `custom_model_training_nvidia_t4_gpus`: GoogleCloudPlatform/training-
data-analyst#2457 and others), their family's `custom_model_training_<family>_cpus` for
the others (c2 and n2 are listed so by Cloud Quotas). For the GPU families (a2, a3, a4,
g2) that name follows the pattern but no source we could read confirms it: it is checked
where the project's quotas list it, and otherwise reported as not known, never refused
(`Quota.limit` None). A job above a quota is
refused with 429 RESOURCE_EXHAUSTED, "The following quota metrics exceed quota limits:
aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
(GoogleCloudPlatform/stable-diffusion-on-gcp#12, GoogleCloudPlatform/vertex-ai-samples#700,
GoogleCloudPlatform/training-data-analyst#2457).

The limits are read from the Cloud Quotas API (`ListQuotaInfos` of the project's
`aiplatform.googleapis.com` service; permission `cloudquotas.quotas.get`), each quota's
value for the region (or its default); what is in use, from the region's CustomJobs that
are running or waiting for machines (`ListCustomJobs`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from components.gpu.worker_pool import WorkerPool, parse_pools
from trainer.common.errors import InputError

SERVICE = "aiplatform.googleapis.com"
#: Each GPU type's part of its quotas' names (the pattern above; e.g. H100's
#: `custom_model_training_nvidia_h100_gpus`, A3 Mega's `..._nvidia_h100_mega_gpus` in
#: Google's Vertex AI training recipes).
GPU_QUOTA_NAMES = {
    "NVIDIA_TESLA_K80": "nvidia_k80_gpus", "NVIDIA_TESLA_P4": "nvidia_p4_gpus",
    "NVIDIA_TESLA_P100": "nvidia_p100_gpus", "NVIDIA_TESLA_V100": "nvidia_v100_gpus",
    "NVIDIA_TESLA_T4": "nvidia_t4_gpus", "NVIDIA_TESLA_A100": "nvidia_a100_gpus",
    "NVIDIA_A100_80GB": "nvidia_a100_80gb_gpus", "NVIDIA_L4": "nvidia_l4_gpus",
    "NVIDIA_H100_80GB": "nvidia_h100_gpus", "NVIDIA_H100_MEGA_80GB": "nvidia_h100_mega_gpus",
    "NVIDIA_H200_141GB": "nvidia_h200_gpus", "NVIDIA_B200": "nvidia_b200_gpus",
    "NVIDIA_GB200": "nvidia_gb200_gpus", "NVIDIA_RTX_PRO_6000": "nvidia_rtx_pro_6000_gpus",
}
#: Scheduling strategies that use the preemptible quotas.
PREEMPTIBLE = ("SPOT", "FLEX_START")
#: The CustomJob states that hold (or wait for) machines.
ACTIVE_STATES = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING")
#: Where a quota increase is asked for (Cloud Quotas docs: "Request a quota adjustment").
INCREASE_PAGE = "https://console.cloud.google.com/iam-admin/quotas"


class QuotaError(InputError):
    """A configuration needs more than the project's quota allows."""


@dataclasses.dataclass(frozen=True)
class Need:
    """How much of one quota a configuration holds while it runs.

    Attributes:
        metric: The quota's metric, `aiplatform.googleapis.com/custom_model_training_...`.
        region: Where.
        amount: GPUs or vCPUs.
        what: Where the amount comes from, e.g. `2 replicas x 1 NVIDIA_TESLA_T4`.
    """

    metric: str
    region: str
    amount: int
    what: str


def metric(kind: str, scheduling: str) -> str:
    """A custom-training quota's metric: `kind` is e.g. `nvidia_t4_gpus` or `cpus`."""
    preemptible = "preemptible_" if scheduling in PREEMPTIBLE else ""
    return f"{SERVICE}/custom_model_training_{preemptible}{kind}"


def machine_vcpus(machine_type: str) -> int:
    """A machine type's vCPUs (the catalog's, else its name's last number; E2's
    shared-core types have 2)."""
    from components.gpu import catalog as cat

    known = {**cat.N1_MACHINES, **cat.A2_MACHINES, **cat.MODERN_MACHINES}.get(machine_type)
    if known is not None:
        return known.vcpus
    last = machine_type.rsplit("-", 1)[-1]
    return int(last) if last.isdigit() else 2


def cpu_quota_name(machine_type: str) -> str:
    """The CPU quota of a machine family: N1 and E2 share `cpus`, others their own."""
    family = machine_type.split("-", 1)[0]
    return "cpus" if family in ("n1", "e2") else f"{family}_cpus"


def needs(pools: Sequence[WorkerPool | None], region: str, scheduling: str,
          copies: int = 1) -> list[Need]:
    """The quota a job of `pools` holds: the GPUs of pools with GPUs, and every pool's
    vCPUs (a Reduction Server's included), times `copies` (parallel trials)."""
    amounts: dict[str, int] = defaultdict(int)
    parts: dict[str, list[str]] = defaultdict(list)
    for pool in pools:
        if not pool:
            continue
        replicas, machine = pool.replicas, pool.machine
        gpu, count = pool.accelerator, pool.gpus_per_machine
        held = []
        if count and gpu in GPU_QUOTA_NAMES:
            held.append((metric(GPU_QUOTA_NAMES[gpu], scheduling), count, gpu))
        if machine:
            held.append((metric(cpu_quota_name(machine), scheduling), machine_vcpus(machine),
                         f"vCPUs of {machine}" + (" (Reduction Server)"
                                                  if pool.reduction_server else "")))
        for key, amount, unit in held:
            amounts[key] += replicas * amount * copies
            parts[key].append(f"{replicas} x {amount} {unit}")
    suffix = f", x {copies} parallel trials" if copies > 1 else ""
    return [Need(key, region, amounts[key], " + ".join(parts[key]) + suffix)
            for key in amounts]


def serving_needs(machine_spec: Mapping[str, Any], replicas: int, region: str) -> list[Need]:
    """The quota an endpoint's deployed model holds at its most replicas: its GPUs under
    `custom_model_serving_<gpu>` (the names gcloud's Model Garden deploy checks:
    googlecloudsdk/command_lib/ai/model_garden_utils.py) and its vCPUs under
    `custom_model_serving_cpus` (the same pattern, not confirmed: reported as not known
    where the project does not list it)."""
    machine = str(machine_spec.get("machine_type", ""))
    gpu = str(machine_spec.get("accelerator_type", "") or "")
    count = int(machine_spec.get("accelerator_count", 0) or 0)
    found = [Need(f"{SERVICE}/custom_model_serving_cpus", region,
                  replicas * machine_vcpus(machine), f"{replicas} x {machine}")]
    if gpu in GPU_QUOTA_NAMES and count:
        found.append(Need(f"{SERVICE}/custom_model_serving_{GPU_QUOTA_NAMES[gpu]}", region,
                          replicas * count, f"{replicas} x {count} {gpu}"))
    return found


@dataclasses.dataclass(frozen=True)
class Quota:
    """One need held against the project's quota.

    Attributes:
        need: What the configuration needs.
        limit: The quota's value in the region; None when the project has no such quota
            (not checked); -1 unlimited.
        in_use: Held by the region's active CustomJobs; None when not read.
        quota_id: The quota's ID, as the Cloud Quotas page lists it.
    """

    need: Need
    limit: int | None
    in_use: int | None = None
    quota_id: str = ""

    @property
    def refused(self) -> bool:
        """The limit is below the need: Vertex AI would refuse the job."""
        return self.limit is not None and 0 <= self.limit < self.need.amount

    @property
    def busy(self) -> bool:
        """What other jobs hold leaves less than the need (the job would wait or fail)."""
        return (not self.refused and self.limit is not None and self.limit >= 0
                and self.in_use is not None and self.limit - self.in_use < self.need.amount)

    def describe(self, project: str) -> str:
        name = self.need.metric.rsplit("/", 1)[-1]
        if self.limit is None:
            return (f"{self.need.metric} in {self.need.region}: needs {self.need.amount} "
                    f"({self.need.what}); the project has no such quota, not checked")
        if self.refused:
            return (f"{self.need.metric} in {self.need.region}: needs {self.need.amount} "
                    f"({self.need.what}) but the quota allows {self.limit}; ask for at least "
                    f"{self.need.amount} at {INCREASE_PAGE}?project={project} (filter "
                    f"{name}, region {self.need.region}"
                    + (f", quota {self.quota_id}" if self.quota_id else "") + ")")
        allowed = "unlimited" if self.limit < 0 else str(self.limit)
        used = "" if self.in_use is None else f", {self.in_use} in use by active CustomJobs"
        return (f"{self.need.metric} in {self.need.region}: needs {self.need.amount} "
                f"({self.need.what}), quota {allowed}{used}")


def quotas_client() -> Any:
    """A Cloud Quotas client with the default credentials."""
    from google.cloud import cloudquotas_v1

    return cloudquotas_v1.CloudQuotasClient()


def quota_parent(project: str) -> str:
    """The Cloud Quotas parent of Vertex AI's quotas in a project."""
    return f"projects/{project}/locations/global/services/{SERVICE}"


def active_jobs_filter() -> str:
    """ListCustomJobs' filter for the jobs that hold or wait for machines."""
    return " OR ".join(f'state="{state}"' for state in ACTIVE_STATES)


def read_quota_infos(client: Any, project: str) -> dict[str, Any]:
    """The project's Vertex AI QuotaInfos by metric (one listing, every page)."""
    from google.cloud import cloudquotas_v1

    request = cloudquotas_v1.ListQuotaInfosRequest(parent=quota_parent(project))
    found: dict[str, Any] = {}
    for info in client.list_quota_infos(request=request):
        if "region" in info.dimensions or info.metric not in found:
            found[info.metric] = info  # the per-region quota of a metric, if several
    return found


def limit_in(info: Any, region: str) -> int | None:
    """A QuotaInfo's value in a region: the region's own, else the default's."""
    default = None
    for dimensions in info.dimensions_infos:
        where = dict(dimensions.dimensions).get("region")
        if where == region:
            return int(dimensions.details.value)
        if where is None:
            default = int(dimensions.details.value)
    return default


def in_use(jobs_client: Any, project: str, region: str) -> dict[str, int]:
    """What the region's active CustomJobs hold, by quota metric."""
    from google.cloud import aiplatform_v1

    request = aiplatform_v1.ListCustomJobsRequest(
        parent=f"projects/{project}/locations/{region}", filter=active_jobs_filter())
    held: dict[str, int] = defaultdict(int)
    for job in jobs_client.list_custom_jobs(request=request):
        spec = aiplatform_v1.CustomJob.to_dict(job, use_integers_for_enums=False)["job_spec"]
        strategy = (spec.get("scheduling") or {}).get("strategy") or "STANDARD"
        for need in needs(parse_pools(spec.get("worker_pool_specs", [])), region, strategy):
            held[need.metric] += need.amount
    return held


def check(needed: Iterable[Need], infos: Mapping[str, Any],
          used: Callable[[str], Mapping[str, int]] | None = None) -> list[Quota]:
    """Each need against its quota (and, with `used`, what the region's jobs hold)."""
    found = []
    for need in needed:
        info = infos.get(need.metric)
        limit = limit_in(info, need.region) if info is not None else None
        held = used(need.region).get(need.metric, 0) if used is not None else None
        found.append(Quota(need, limit, held, info.quota_id if info is not None else ""))
    return found
