"""How long each configuration will train, for `vertex.budget_usd` and the dry run's cost:
from the same speed record the training plan decides by, per configuration.

For each configuration (the primary, each fallback), the first of:

1. **Its own cluster, measured.** The newest registered model that trained on these very
   machines (same machine type, GPU type and count, replicas: its `lineage.json`), at the
   seconds per epoch its run measured (`efficiency.json`: warm-up and validation
   included), scaled to this run's images when both sizes are known.
2. **Its GPU, benchmarked.** The GPU benchmark's results for its GPU and the run's model
   at the run's image size (`trainer.cluster.measurements`, the files the training plan
   reads, in its order: the GPU's own first; another GPU of its architecture stands in and
   is cited "extrapolated from"; a file measured on CPUs never counts here): the case
   that ran as the configuration's plan does, else the file's slowest, plus the case's
   warm-up, as an upper bound. The benchmark runs one GPU: several are taken at a stated
   conservative scaling (`scaled`), the training images at the cluster's speed and the
   validation images at one machine's (every training machine reads them all), and the
   line says "at most" and the scaling.
3. **Nothing measured:** `vertex.timeout`, the longest Vertex AI lets the job run
   (`scheduling.timeout`), so the estimate is what it can cost at most.

A speed measured on one configuration is never lent to another: a slower, cheaper
fallback is not made to look cheaper than it is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.capacity.measured_speed import Registered
    from components.gpu.alternatives import Alternative
    from trainer.cluster.measurements import Case, Measurements, ResultsFile
    from trainer.cluster.training_plan import TrainingPlan


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What the hours are estimated from.

    Attributes:
        epochs: The epochs the run trains (every phase's).
        timeout: `vertex.timeout`.
        model: `training.model`.
        batch: `training.batch_size` (a replica's).
        image_size: The images' side in pixels (0: unknown).
        images: Training and validation images an epoch (0: unknown).
        validation_images: Those of them that are the validation split's (0: not told
            apart; then all are charged at the cluster's speed).
        images_from: Where `images` was read, in words.
        registered: The newest registered model with measured figures, if any.
        measurements: The GPU benchmark's results files (None: none read).
    """

    epochs: int
    timeout: str
    model: str = ""
    batch: int = 0
    image_size: int = 0
    images: int = 0
    validation_images: int = 0
    images_from: str = ""
    registered: Registered | None = None
    measurements: Measurements | None = None


@dataclasses.dataclass(frozen=True)
class Hours:
    """One configuration's expected training time.

    Attributes:
        hours: How long.
        basis: Where it comes from, in words (with its figures and file).
        measured: False when it is `vertex.timeout`'s bound.
    """

    hours: float
    basis: str
    measured: bool = True


def epoch_images(manifest: dict[str, Any]) -> int:
    """The training and validation images of an epoch of a prepared dataset."""
    return sum(int(manifest["splits"][split]["count"]) for split in ("train", "validation"))


def validation_images(manifest: dict[str, Any]) -> int:
    """The validation images of an epoch of a prepared dataset."""
    return int(manifest["splits"].get("validation", {}).get("count", 0))


#: The scaling the estimate assumes where none was measured, conservative so that the
#: hours are an upper bound: each GPU beyond the first in a machine adds 80% of one (NCCL
#: over NVLink or PCIe), each machine beyond the first 50% of one (the image's all-reduce
#: between machines goes over their standard network: docs/training-plan.md).
WITHIN_MACHINE, ACROSS_MACHINES = 0.8, 0.5


def scaled(gpus_per_machine: int, machines: int) -> float:
    """How many single GPUs' speed `machines` machines of `gpus_per_machine` GPUs are taken
    to train at (`WITHIN_MACHINE`, `ACROSS_MACHINES`)."""
    machine = 1 + (max(gpus_per_machine, 1) - 1) * WITHIN_MACHINE
    return machine * (1 + (max(machines, 1) - 1) * ACROSS_MACHINES)


def pools_key(pools: Any) -> tuple[tuple[Any, ...], ...]:
    """What makes two configurations' machines the same: per used pool, its role, machine
    type, GPU type and count, and replicas."""
    return tuple((p.role, p.machine, p.accelerator, p.gpus_per_machine, p.replicas)
                 for p in pools if p)


def training_gpus(alternative: Alternative) -> tuple[str, int]:
    """(the slowest GPU type of its training machines, how many GPUs train in all); ("",
    0) without GPUs. Under ParameterServerStrategy the workers alone train."""
    from components.gpu.pools import training_gpus as kinds_of
    from components.gpu.pools import training_pools

    strategy = alternative.plan.strategy if alternative.plan else "multi_worker_mirrored"
    kinds, _ = kinds_of(alternative.pools, strategy)
    count = sum(p.replicas * p.gpus_per_machine
                for p in training_pools(alternative.pools, strategy))
    return (kinds[0] if kinds else ""), count


def training_machines(alternative: Alternative) -> tuple[int, int]:
    """(GPUs per training machine, the fewest of its pools; training machines)."""
    from components.gpu.pools import training_pools

    strategy = alternative.plan.strategy if alternative.plan else "multi_worker_mirrored"
    pools = training_pools(alternative.pools, strategy)
    return (min((p.gpus_per_machine for p in pools), default=0),
            sum(p.replicas for p in pools))


def hours_for(alternative: Alternative, evidence: Evidence) -> Hours:
    """The configuration's expected training time, from the first record that measured it
    (the module's order)."""
    from components.gpu.worker_pool import parse_pools

    registered = evidence.registered
    if registered and registered.seconds_per_epoch and registered.worker_pool_specs:
        try:
            same = pools_key(parse_pools(registered.worker_pool_specs)) == \
                pools_key(alternative.pools)
        except Exception:  # noqa: BLE001 - a lineage this version cannot read is no record
            same = False
        if same:
            return _from_registered(registered, evidence)
    gpu, gpus = training_gpus(alternative)
    found = speed_case(evidence, gpu, alternative.plan) if gpus else None
    if found and evidence.images:
        return _from_benchmark(evidence, gpu, training_machines(alternative), *found)
    what = (f"{gpus} x {gpu}" if gpus else "these machines") + (
        f" with {evidence.model}" if evidence.model else "")
    unknown = "" if not found else (
        f"; {gpu} was benchmarked, but the dataset's size is known once it is prepared (the "
        "training step holds the budget again then)")
    bound = timeout_bound(evidence.timeout)
    return dataclasses.replace(bound, basis=f"no measured speed for {what}: {bound.basis}"
                                            f"{unknown}")


def timeout_bound(timeout: str) -> Hours:
    """`vertex.timeout` as the most a job may train (Vertex AI stops it then: its
    `scheduling.timeout`), the one place this bound is made."""
    return Hours(_seconds(timeout) / 3600, f"vertex.timeout {timeout}, the longest the job "
                                           "may run", measured=False)


def _seconds(duration: str) -> float:
    from components.durations import duration_seconds

    return duration_seconds(duration) or 0.0


def _from_registered(registered: Registered, evidence: Evidence) -> Hours:
    per_epoch = registered.seconds_per_epoch or 0.0
    then, now = registered.images_per_epoch, evidence.images
    scaled = ""
    if then and now and then != now:
        per_epoch *= now / then
        scaled = f", scaled from its {then:,} images an epoch to {now:,}"
    return Hours(per_epoch * evidence.epochs / 3600,
                 f"{evidence.epochs} epoch(s) at {per_epoch:.0f} s, as {registered.version} "
                 f"measured on these machines{scaled}")


def speed_case(evidence: Evidence, gpu: str, plan: TrainingPlan | None
               ) -> tuple[Case, ResultsFile, str] | None:
    """The benchmarked case that speaks for `gpu` running `plan`: from the first file (the
    plan's order) of the run's model with a completed case at the run's image size, the
    case with the plan's precision and XLA that agrees with the plan on the most of the
    rest (the run's own TFRecords and batch count too; the slower of a tie), else that
    file's slowest case; with why it is that case."""
    if evidence.measurements is None or not gpu:
        return None
    for results in evidence.measurements.for_gpu(gpu, evidence.model):
        if results.on_cpu or results.model != evidence.model:
            continue
        done = [c for c in results.cases if c.images_per_second
                and c.image_size == evidence.image_size]
        if not done:
            continue
        like = [c for c in done if plan and (c.precision, c.xla) == (plan.mixed_precision,
                                                                      plan.xla)]
        if not like:
            return (min(done, key=_speed), results,
                    "its slowest case: none ran the plan's precision and XLA")

        def agrees(case: Case) -> int:
            return sum((case.nvidia_environment == plan.nvidia_environment,
                        case.keep_nhwc == plan.keep_nhwc,
                        case.prefetch == plan.prefetch_to_gpu, case.input == "tfrecords",
                        case.batch == evidence.batch))
        top = max(map(agrees, like))
        return (min((c for c in like if agrees(c) == top), key=_speed), results,
                "the case closest to the plan")
    return None


def _speed(case: Case) -> float:
    return case.images_per_second or 0.0


def _from_benchmark(evidence: Evidence, gpu: str, cluster: tuple[int, int], case: Case,
                    results: ResultsFile, chosen: str) -> Hours:
    """The hours at most: the training images at the cluster's speed (`scaled`, not
    measured), the validation images at one machine's (under MultiWorkerMirroredStrategy
    every training machine reads the whole validation split), and the case's warm-up."""
    from trainer.cluster.measured_plan import cited

    per_machine, machines = cluster
    one = _speed(case)
    cluster_rate = one * scaled(per_machine, machines)
    machine_rate = one * scaled(per_machine, 1)
    validation = min(evidence.validation_images, evidence.images)
    training = evidence.images - validation
    warmup = float(case.warmup_seconds or 0.0)
    seconds = evidence.epochs * (training / cluster_rate + validation / machine_rate) + warmup
    gpus = per_machine * machines
    scaling = "" if gpus <= 1 else (
        f", {gpus} GPUs taken at {scaled(per_machine, machines):.1f} x one (not measured: "
        f"each GPU beyond the first in a machine {WITHIN_MACHINE:.0%} of one, each machine "
        f"beyond the first {ACROSS_MACHINES:.0%} of one)")
    batch = "" if not evidence.batch or case.batch == evidence.batch else (
        f"; measured at batch {case.batch}, the run's is {evidence.batch}")
    read = (f"{training:,} training images at the cluster's speed and {validation:,} "
            f"validation images at one machine's (each training machine reads them all)"
            if validation else f"{evidence.images:,} images")
    return Hours(seconds / 3600, (
        f"at most: {evidence.epochs} epoch(s) of {read} ({evidence.images_from}) at "
        f"{one:,.0f} images/s a GPU{scaling} + {warmup:.0f} s warm-up: {chosen}, "
        f"{case.name} {cited(results, gpu)}{batch}"))
