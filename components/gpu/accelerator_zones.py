"""Where Compute Engine offers the GPU guide's accelerator types (T4, V100, P100, P4, A100),
zone by zone, in every region: read as data from `accelerator_zones.csv` (the 2026 snapshot
of Compute Engine's accelerator types per zone, its source and rule in the file's header),
with the K80's zones, which that snapshot no longer lists, from the 2022 one
(`catalog.K80_ZONES`).

The GPU guide's rule that no single us-central1 zone offers T4, K80 and P100 together for
training is kept: the snapshot lists T4 in us-central1-c, and that zone is left out of the
T4's (`GUIDE_EXCEPTIONS`). Vertex AI's training locations are at most Compute Engine's
zones (its locations page's table could not be read here).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

from components.gpu import catalog as cat

DATA = Path(__file__).with_name("accelerator_zones.csv")
SOURCE = ("Compute Engine's accelerator types per zone (skypilot-org/skypilot-catalog "
          "catalogs/v7/gcp/vms.csv, commit 017e2502, read 2026-11-28; K80: catalogs/v2, 2022)")
#: The snapshot's names of each type: its AcceleratorName, or the machine that carries it.
TYPES = {"T4": cat.T4, "V100": cat.V100, "P100": cat.P100, "P4": cat.P4,
         "a2-highgpu-1g": cat.A100}
#: (GPU type, zone) pairs the GPU guide's rules take out of the snapshot.
GUIDE_EXCEPTIONS = frozenset({(cat.T4, "us-central1-c")})


def region_of(zone: str) -> str:
    """`us-central1-a` -> `us-central1`."""
    return zone.rsplit("-", 1)[0]


@functools.cache
def zones() -> dict[str, dict[str, frozenset[str]]]:
    """Region -> zone -> the guide's GPU types offered there."""
    found: dict[str, dict[str, set[str]]] = {}

    def add(gpu: str, zone: str) -> None:
        if (gpu, zone) not in GUIDE_EXCEPTIONS:
            found.setdefault(region_of(zone), {}).setdefault(zone, set()).add(gpu)

    lines = [line for line in DATA.read_text().splitlines() if not line.startswith("#")]
    for row in csv.DictReader(lines):
        add(TYPES[row["type"]], row["zone"])
    for region_zones in cat.K80_ZONES.values():
        for zone in region_zones:
            add(cat.K80, zone)
    return {region: {zone: frozenset(gpus) for zone, gpus in sorted(by_zone.items())}
            for region, by_zone in sorted(found.items())}


def regions_of(gpu: str) -> list[str]:
    """The regions with a zone offering `gpu` ([] for a type this data does not hold)."""
    return [region for region, by_zone in zones().items()
            if any(gpu in offered for offered in by_zone.values())]


#: The types this data holds.
ZONED = frozenset({*TYPES.values(), cat.K80})
