"""What a run's training cost: every attempt's machines for the time Vertex AI bills them,
each at its region's prices (`components.prices.price_list`: Google's price catalog, its
cache or the shipped table, said which, with `vertex.prices` over them).

Billing (Vertex AI pricing: "You pay only for compute hours used; if training fails for
any reason other than a user-initiated cancellation, you are not billed for the time. You
are charged for training time if you cancel the operation."): a succeeded job is billed,
a cancelled one too (the training step's own cancellation of a job queued past
`vertex.queue_limit` is a user's), a failed or expired one is not (`BILLED`). The time is
the job's `start_time` (when all its replicas run) to its `end_time`: the provisioning
before `start_time` is left out, so this estimate is a lower bound; disks, network and
storage are not counted. A Spot or DWS Flex-start job (`jobSpec.scheduling.strategy`) is
priced at its own SKUs (Compute Engine's plus Vertex AI's management fee); a type without
them is priced on demand and the estimate says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from components.gpu.worker_pool import WorkerPool, parse_pools
from components.prices.price_list import (
    DISCOUNTED,
    PriceBook,
    hourly_words,
    price_of,
    unpriced_words,
)

#: The states Vertex AI bills a job or a batch prediction in, the one table of them: done,
#: cancelled by the user (also while cancelling), or partly done (a batch prediction).
BILLED = {"JOB_STATE_SUCCEEDED", "JOB_STATE_CANCELLED", "JOB_STATE_CANCELLING",
          "JOB_STATE_PARTIALLY_SUCCEEDED"}


@dataclasses.dataclass(frozen=True)
class Rate:
    """Pools' price: USD an hour, the types with no price, the Spot or Flex-start types
    priced on demand for want of their own, and the pools on a specific reservation
    (`reserved`): their machines and GPUs are the reservation's, so `usd` holds only
    Vertex AI's management fee for them (`RESERVED:<type>`; unpriced like any other part
    when no price for it is known)."""

    usd: float
    unpriced: tuple[str, ...]
    on_demand: tuple[str, ...] = ()
    reserved: tuple[str, ...] = ()

    def reserved_words(self) -> str:
        """`; reserved: 2 x a3-highgpu-8g ...: 0 USD beyond the reservation` ("" if none)."""
        if not self.reserved:
            return ""
        return (f"; reserved: {', '.join(self.reserved)}: 0 USD beyond the reservation for "
                "their machines and GPUs, only Vertex AI's management fee")


def rate(pools: Iterable[WorkerPool | None], prices: Mapping[str, float],
         strategy: str = "") -> Rate:
    """The pools' machines and GPUs, every replica, at `prices` (`price_of`) for `strategy`
    (a scheduling strategy, or PREDICTION for prediction nodes); a pool on a specific
    reservation at its management fee alone (RESERVED)."""
    total, unpriced, on_demand, reserved = 0.0, [], [], []
    for pool in pools:
        if not pool or not pool.replicas:
            continue
        on_reservation = bool(pool.reserved and pool.reserved.holds_capacity)
        reserved += [pool.describe()] if on_reservation else []
        pricing = "RESERVED" if on_reservation else strategy
        for kind, count in ((pool.machine, 1), (pool.accelerator, pool.gpus_per_machine)):
            if not kind or not count:
                continue
            found = price_of(prices, kind, pricing)
            if found.usd is None:
                key = f"RESERVED:{kind}" if on_reservation else kind
                unpriced += [key] if key not in unpriced else []
                continue
            total += pool.replicas * count * found.usd
            on_demand += [kind] if found.on_demand and kind not in on_demand else []
    return Rate(total, tuple(unpriced), tuple(on_demand), tuple(reserved))


def region_of(name: str, default: str = "") -> str:
    """The region of a Vertex AI resource name (`projects/P/locations/R/...`)."""
    parts = name.split("/")
    return parts[3] if len(parts) > 3 and parts[2] == "locations" else default


@dataclasses.dataclass
class JobCost:
    """One job's estimate."""

    job: str
    state: str
    seconds: float
    usd: float
    unpriced: list[str]
    strategy: str = ""  # SPOT or FLEX_START: priced apart from on-demand
    on_demand_rate: bool = False  # a Spot or Flex-start type priced at the on-demand rate
    prices: str = ""  # where its prices come from (`PriceList.words`)
    pools: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # `itemised`

    @property
    def billed(self) -> bool:
        return self.state in BILLED


def job_cost(job: Mapping[str, Any], book: PriceBook) -> JobCost:
    """A CustomJob resource's estimate (REST field names, as the API returns them), at its
    region's prices."""
    from components.capacity.cost_item import seconds_of

    seconds = seconds_of(job)
    state = str(job.get("state", ""))
    spec = job.get("jobSpec", {})
    strategy = str((spec.get("scheduling") or {}).get("strategy") or "")
    strategy = strategy if strategy in DISCOUNTED else ""
    pools = parse_pools(spec.get("workerPoolSpecs", []))
    name = str(job.get("name", ""))
    prices = book.region(region_of(name, book.default_region))
    found = rate(pools, prices, strategy)
    usd = found.usd * seconds / 3600 if state in BILLED else 0.0
    return JobCost(name, state, round(seconds, 1), round(usd, 4), list(found.unpriced),
                   strategy, bool(found.on_demand), prices.words(),
                   itemised(pools, prices, strategy, seconds if state in BILLED else 0.0))


def itemised(pools: Iterable[WorkerPool | None], prices: Mapping[str, float], strategy: str,
             seconds: float) -> list[dict[str, Any]]:
    """Each used pool's share of a job's cost: its replicas, machine and GPUs, its price
    an hour and its USD for `seconds` of billed time (None where a type is unpriced)."""
    found = []
    for pool in pools:
        if not pool or not pool.replicas:
            continue
        found_rate = rate([pool], prices, strategy)
        found.append({"pool": pool.role, "replicas": pool.replicas, "machine": pool.machine,
                      "accelerator": pool.accelerator, "gpus_per_machine":
                      pool.gpus_per_machine, "usd_per_hour": round(found_rate.usd, 6),
                      "hours": round(seconds / 3600, 4),
                      "usd": round(found_rate.usd * seconds / 3600, 4),
                      "unpriced": list(found_rate.unpriced),
                      **({"reserved": pool.reserved.name,
                          "beyond_the_reservation": "Vertex AI's management fee only"}
                         if found_rate.reserved else {})})
    return found


def run_cost(jobs: Iterable[Mapping[str, Any]], book: PriceBook, *,
             epochs: int, training_images: int) -> dict[str, Any]:
    """The run's estimate from its jobs (each once), per epoch and per 1,000 images, and
    for each configuration the run tried (`configurations`)."""
    seen: dict[str, JobCost] = {}
    labels: dict[str, str] = {}
    for job in jobs:
        cost = job_cost(job, book)
        seen[cost.job] = cost
        labels[cost.job] = _label(job)
    usd = round(sum(c.usd for c in seen.values()), 4)
    unpriced = sorted({kind for c in seen.values() for kind in c.unpriced})
    sources = list(dict.fromkeys(c.prices for c in seen.values())) or \
        [book.region(book.default_region).words()]
    return {"usd": usd, "per_epoch_usd": round(usd / epochs, 4) if epochs else None,
            "per_1000_images_usd": round(1000 * usd / training_images, 6)
            if training_images else None,
            "jobs": [dataclasses.asdict(c) | {"billed": c.billed} for c in seen.values()],
            "configurations": configurations(seen, labels, epochs, training_images),
            "unpriced": unpriced, "prices_read": "; ".join(sources),
            "leaves_out": "provisioning before each job's start_time, disks, network, "
                          "storage and the pipeline's own steps"}


def _label(job: Mapping[str, Any]) -> str:
    from components.capacity.job_records import ALTERNATIVE_LABEL

    index = str((job.get("labels") or {}).get(ALTERNATIVE_LABEL, ""))
    if not index.isdigit():
        return "unlabelled"
    return "primary" if index == "0" else f"fallbacks[{int(index) - 1}]"


def configurations(seen: Mapping[str, JobCost], labels: Mapping[str, str], epochs: int,
                   training_images: int) -> list[dict[str, Any]]:
    """What an epoch and 1,000 training images cost on each configuration the run tried:
    its price an hour at the seconds per epoch of the job that trained (its billed time
    over its epochs, start-up included), so that the configurations compare."""
    trained = next((c for c in reversed(list(seen.values()))
                    if c.state == "JOB_STATE_SUCCEEDED"), None)
    per_epoch = trained.seconds / epochs if trained and epochs else None
    found: dict[str, dict[str, Any]] = {}
    for name, cost in seen.items():
        rate = sum(pool["usd_per_hour"] for pool in cost.pools)
        epoch_usd = rate * per_epoch / 3600 if per_epoch is not None else None
        found.setdefault(labels[name], {
            "configuration": labels[name], "usd_per_hour": round(rate, 6),
            "per_epoch_usd": round(epoch_usd, 4) if epoch_usd is not None else None,
            "per_1000_images_usd": round(1000 * epoch_usd * epochs / training_images, 6)
            if epoch_usd is not None and training_images else None,
            "unpriced": cost.unpriced, "trained": cost is trained})
    return list(found.values())


#: Trial states Vertex AI does not bill (the study record's words: an infeasible trial
#: failed).
UNBILLED_TRIALS = {"FAILED", "INFEASIBLE"}


def tuning_cost(trials: Iterable[Mapping[str, Any]], pools: Iterable[WorkerPool | None],
                prices: Mapping[str, float], strategy: str = "") -> dict[str, Any]:
    """A study's estimate: every trial but the failed ones on the trials' pools (each
    trial a job of its own) for its `seconds`, start to end, at `prices` (the study's
    region's) for the trials' scheduling `strategy` (`trialJobSpec.scheduling.strategy`:
    Spot trials at Spot prices, on demand where none is known, said)."""
    strategy = strategy if strategy in DISCOUNTED else ""
    found = rate(pools, prices, strategy)
    trials = list(trials)
    billed = [t for t in trials if t["state"] not in UNBILLED_TRIALS]
    seconds = sum(float(t.get("seconds") or 0) for t in billed)
    return {"usd": round(found.usd * seconds / 3600, 4), "trials": len(trials),
            "billed_trials": len(billed), "seconds": round(seconds, 1),
            "usd_per_hour": round(found.usd, 6), "unpriced": list(found.unpriced),
            "strategy": strategy, "on_demand": list(found.on_demand),
            "prices_read": getattr(prices, "words", lambda: "vertex.prices")()}


def tuning_line(cost: Mapping[str, Any]) -> str:
    """A study's estimate in one line."""
    strategy = f"{cost['strategy']} " if cost.get("strategy") else ""
    return (f"tuning cost: about {cost['usd']:.2f} USD for {cost['billed_trials']} billed "
            f"{strategy}trial(s) of {cost['trials']} ({cost['seconds'] / 3600:.3f} trial-hours "
            f"at {hourly_words(cost['usd_per_hour'], cost['unpriced'])}; a failed trial is "
            f"not billed; {cost['prices_read']})"
            + (f"; {', '.join(cost['on_demand'])} priced on demand: no {cost['strategy']} "
               "price found" if cost.get("on_demand") else "")
            + unpriced_words(cost["unpriced"]))


def line(cost: Mapping[str, Any]) -> str:
    """The estimate in one line."""
    jobs = cost["jobs"]
    text = (f"cost: about {cost['usd']:.2f} USD for {len(jobs)} job(s)"
            + (f", {cost['per_epoch_usd']:.4f} USD per epoch" if cost["per_epoch_usd"] else "")
            + (f", {cost['per_1000_images_usd']:.4f} USD per 1,000 training images"
               if cost["per_1000_images_usd"] else "")
            + f" ({cost['prices_read']}; a lower bound: it leaves out "
            f"{cost['leaves_out']})")
    not_billed = [f"{j['job'].rsplit('/', 1)[-1]} {j['state'].replace('JOB_STATE_', '')}"
                  for j in jobs if not j["billed"]]
    if not_billed:
        text += f"; not billed: {', '.join(not_billed)}"
    text += unpriced_words(cost["unpriced"])
    compared = [c for c in cost.get("configurations", []) if c["per_epoch_usd"] is not None]
    if len(compared) > 1 or any(not c["trained"] for c in compared):
        text += "; per configuration tried: " + ", ".join(
            f"{c['configuration']} {c['per_epoch_usd']:.4f} USD per epoch"
            + (f", {c['per_1000_images_usd']:.4f} per 1,000 images"
               if c["per_1000_images_usd"] is not None else "")
            + (" (trained)" if c["trained"] else "") for c in compared)
    at_list = sorted({j["strategy"] for j in jobs if j.get("on_demand_rate")})
    if at_list:
        text += (f"; {' and '.join(at_list)} job(s) priced at on-demand rates where no "
                 f"{' or '.join(at_list)} price was found, an upper bound (give "
                 f"{at_list[0]}:<type> in vertex.prices)")
    return text


FILE = "cost.json"


def estimate_run(record: Mapping[str, Any], book: PriceBook, job_dir: str,
                 client_for: Any) -> dict[str, Any]:
    """The training step's estimate: every job of the capacity record (`record`; a job a
    resumed step followed counted once) read from Vertex AI (`client_for(region)`: a
    JobServiceClient), each at its region's prices (`book`), per epoch and per 1,000
    training images from the trainer's report in `job_dir`; written there as `cost.json`."""
    import os

    from google.protobuf import json_format

    from trainer.common import files
    from trainer.common.cloud_calls import remote_call
    from trainer.run.history import REPORT_FILE

    jobs = []
    for attempt in record.get("attempts", []):
        if not attempt.get("job"):
            continue
        with remote_call(f"reading the job {attempt['job']} for its cost"):
            job = client_for(attempt["region"]).get_custom_job(name=attempt["job"])
        jobs.append(json_format.MessageToDict(type(job).pb(job)))
    report_path = os.path.join(job_dir, REPORT_FILE)
    report = files.read_json(report_path, missing={})
    epochs = int(report.get("epochs_run", 0) or 0)
    images = epochs * int(report.get("steps_per_epoch", 0) or 0) * \
        int(report.get("global_batch_size", 0) or 0)
    cost = run_cost(jobs, book, epochs=epochs, training_images=images)
    files.write_json(os.path.join(job_dir, FILE), cost)
    return cost


def book_of(vertex: Mapping[str, Any], log: Any = None) -> PriceBook:
    """The prices of a run (its `vertex` parameter: `vertex.prices` over what was read, its
    region the default), for a component; `log` gets the line saying the catalog could not
    be read."""
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    return PriceBook.of(validate(VertexOptions, vertex, prefix="vertex", strict=False), log=log)


def tell_cost(record: Mapping[str, Any], vertex: Mapping[str, Any], job_dir: str,
              log: Any, client_for: Any) -> dict[str, Any] | None:
    """The training step's last words: the estimate in one line (`client_for(region)`: a
    JobServiceClient). What the run cost is told, never a reason to fail the step: an
    estimate that cannot be made says why."""
    from trainer.common.errors import ProjectError

    try:
        cost = estimate_run(record, book_of(vertex, log), job_dir, client_for)
    except ProjectError as exc:
        log(f"cost: not estimated ({exc})")
        return None
    log(line(cost))
    return cost
