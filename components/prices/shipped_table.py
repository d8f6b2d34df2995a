"""The prices shipped with the project: what an estimate uses when neither the Cloud
Billing Catalog API nor a cache of it can be read, read as data from `shipped_prices.csv`
(Compute Engine's list prices per region, on demand and Spot, from two dated public
readings of the catalog; its header names them).

The readings are checked before a figure is used, as their own rows show they must be:

* a GPU row whose Spot price is above `SPOT_CEILING` of its on-demand price is dropped: no
  Spot price is that close to on-demand (Google's Spot discounts are 60-91%), so its
  "on-demand" figure is another SKU's (the H200 in europe-west4: 36.60 on demand, 36.14
  Spot; in us-central1 74.49 and 37.25);
* a GPU row below `COMMITMENT_FLOOR` of that GPU's dearest region is dropped: it is a
  committed-use price read as on-demand (3-year commitments are 55% off; the regions' own
  prices differ by less: the L4's cheapest, us-east4, is 0.62 of its dearest, me-central2;
  the A100 in europe-west4 reads 1.61 against 3.44 in us-west3 and 2.93 in us-central1);
* a figure of 0 is no price (the reading lists a4-highgpu-8g at 0.0).

Where a GPU's own row is dropped or missing, its price is the whole machine's (`whole`
rows) less the machine alone, per GPU, when both are listed for the region (the A100 in
europe-west4: 3.7480 - 0.8141 = 2.9339, as in us-central1).

A machine type's price is its family's listed type scaled by vCPUs (within these families
memory grows with vCPUs: n1-standard-8 = 0.38 = n1-standard-96 x 8/96).

Vertex AI's training prices are Compute Engine's times `vertex_over_compute_engine()`,
measured from the one machine both are known for (Vertex AI's custom-training price of
n1-standard-4 in us-central1, 0.21849885, over Compute Engine's, 4.55998 x 4/96: 1.1500;
the billing export's H100 in Iowa, 11.2660332, is the same 1.15 over Compute Engine's
9.79655). A Spot job is billed at Compute Engine's Spot price plus Vertex AI's management
fee, taken here as that same share of the on-demand price.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from components.gpu import catalog as cat

TABLE = Path(__file__).with_name("shipped_prices.csv")
#: The region an estimate is priced in when it names none.
REGION = "us-central1"
#: Vertex AI's custom-training price of n1-standard-4 in us-central1 (Vertex AI pricing
#: page as transcribed on 2026-10-07 in api-evangelist/google-vertex-ai
#: plans/google-vertex-ai-plans-pricing.yml).
VERTEX_N1_STANDARD_4 = 0.21849885
SPOT_CEILING = 0.8
COMMITMENT_FLOOR = 0.6
#: The reading's names of the GPU types (SkyPilot's AcceleratorName).
GPU_NAMES = {"T4": cat.T4, "P4": cat.P4, "P100": cat.P100, "V100": cat.V100, "L4": cat.L4,
             "A100": cat.A100, "A100-80GB": cat.A100_80GB, "H100": cat.H100_80GB,
             "H100-MEGA": cat.H100_MEGA, "H200": cat.H200}


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: `usd` and `spot` an hour for `count` GPUs (kind `gpu`), the
    machine alone (`machine`) or the machine with its `count` GPUs (`whole`)."""

    source: str
    kind: str
    name: str
    count: int
    region: str
    usd: float | None
    spot: float | None


def _price(text: str) -> float | None:
    value = float(text) if text.strip() else 0.0
    return value if value > 0 else None


@functools.lru_cache(maxsize=1)
def rows() -> tuple[Row, ...]:
    """The table's rows, as listed."""
    with TABLE.open(encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return tuple(Row(r["source"], r["kind"], r["name"], int(r["count"] or 0), r["region"],
                     _price(r["usd"]), _price(r["spot_usd"]))
                 for r in csv.DictReader(lines))


def _header(key: str) -> str:
    with TABLE.open(encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(f"# {key}:"):
                return line.split(":", 1)[1].strip()
    raise ValueError(f"{TABLE} has no '# {key}:' line")


#: The readings' dates, for an estimate line.
READ = _header("date")


def _vcpus(machine: str) -> int:
    shape = cat.machine_shape(machine)
    if shape is None:
        raise ValueError(f"{TABLE}: {machine} is no machine type the catalog can size")
    return shape.vcpus


def _family(machine: str) -> str:
    return machine.rsplit("-", 1)[0]


def _per_gpu(rows_: Iterable[Row]) -> dict[tuple[str, str], tuple[float, float | None]]:
    """(GPU type, region) -> (on demand, Spot) of one GPU, from the rows that pass."""
    listed = {(GPU_NAMES[r.name], r.region): (r.usd / r.count, r.spot and r.spot / r.count)
              for r in rows_ if r.kind == "gpu" and r.usd and r.name in GPU_NAMES}
    plausible = {key: (usd, spot) for key, (usd, spot) in listed.items()
                 if spot is None or spot <= SPOT_CEILING * usd}
    dearest: dict[str, float] = defaultdict(float)
    for (gpu, _), (usd, _) in plausible.items():
        dearest[gpu] = max(dearest[gpu], usd)
    return {key: value for key, value in plausible.items()
            if value[0] >= COMMITMENT_FLOOR * dearest[key[0]]}


def dropped() -> list[Row]:
    """The GPU rows the checks drop (each module docstring rule names why)."""
    kept = _per_gpu(rows())
    return [r for r in rows() if r.kind == "gpu" and r.name in GPU_NAMES
            and (GPU_NAMES[r.name], r.region) not in kept]


@functools.lru_cache(maxsize=1)
def _compute_engine() -> dict[str, dict[str, float]]:
    """Region -> Compute Engine's prices: GPU types (one GPU), machine types (the machine
    alone), each also `SPOT:<type>`."""
    by_region: dict[str, dict[str, float]] = defaultdict(dict)
    per_vcpu: dict[tuple[str, str], tuple[float, float | None]] = {}
    for r in rows():
        if r.kind == "machine" and r.usd:
            n = _vcpus(r.name)
            per_vcpu[(_family(r.name), r.region)] = (r.usd / n, r.spot and r.spot / n)
    machines = [*cat.N1_MACHINES, *cat.A2_MACHINES, *cat.MODERN_MACHINES]
    for (family, region), (usd, spot) in per_vcpu.items():
        for machine in machines:
            if _family(machine) == family:
                n = _vcpus(machine)
                by_region[region][machine] = usd * n
                if spot:
                    by_region[region][f"SPOT:{machine}"] = spot * n
    gpus = _per_gpu(rows())
    for r in rows():
        shape = cat.machine_shape(r.name) if r.kind == "whole" else None
        gpu = shape.fixed_gpu[0] if shape and shape.fixed_gpu else None
        host = by_region[r.region].get(r.name)
        if gpu is None or (gpu, r.region) in gpus or not (r.usd and host):
            continue
        spot_host = by_region[r.region].get(f"SPOT:{r.name}")
        spot = (r.spot - spot_host) / r.count if r.spot and spot_host else None
        gpus[(gpu, r.region)] = ((r.usd - host) / r.count, spot if spot and spot > 0 else None)
    for (gpu, region), (usd, spot) in gpus.items():
        by_region[region][gpu] = usd
        if spot:
            by_region[region][f"SPOT:{gpu}"] = spot
    return dict(by_region)


@functools.lru_cache(maxsize=1)
def vertex_over_compute_engine() -> float:
    """Vertex AI's training price over Compute Engine's (measured: see the docstring)."""
    return VERTEX_N1_STANDARD_4 / _compute_engine()[REGION]["n1-standard-4"]


def prices(region: str) -> dict[str, float]:
    """`region`'s Vertex AI training prices from the table, USD an hour by `vertex.prices`
    key (a GPU type: one GPU; a machine type: the machine alone; `SPOT:<type>`); empty for
    a region the table has nothing for."""
    ratio = vertex_over_compute_engine()
    found = _compute_engine().get(region, {})
    vertex = {key: usd * ratio for key, usd in found.items() if not key.startswith("SPOT:")}
    for key, usd in found.items():
        if key.startswith("SPOT:"):
            kind = key.split(":", 1)[1]
            vertex[key] = usd + found[kind] * (ratio - 1)
    return vertex
