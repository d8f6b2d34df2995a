"""Region and zone rules for the GPU types of a job's pools: the region offers each type
(the GPU guide's regions and zone snapshot; Compute Engine's zones of the
accelerator-optimized types, `components.gpu.optimized_zones`), and one zone offers them
all together. A type nothing here records gets a warning, not a refusal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from components.gpu import catalog as cat
from components.gpu import optimized_zones as optimized
from trainer.common.schema import short
from trainer.common.suggest import did_you_mean

GPU_REGIONS = cat.GPU_REGIONS


def listed(values: Iterable[Any]) -> str:
    """Values joined for a message: `a, b, c` (the GPU checks' one spelling)."""
    return ", ".join(str(v) for v in values)


def offered_zones(region: str) -> dict[str, set[str]]:
    """The GPU types each zone of `region` offers, as far as the catalog's snapshots know
    (the GPU guide's types in the US regions they cover, the accelerator-optimized types
    everywhere)."""
    zones = {zone: set(offered) for zone, offered in cat.ZONES.get(region, {}).items()}
    for gpu, regions in optimized.ZONES.items():
        for zone in regions.get(region, ()):
            zones.setdefault(zone, set()).add(gpu)
    return zones


def known_regions() -> list[str]:
    """Every region a GPU list here names (the GPU guide's, the zone snapshots')."""
    return sorted({*GPU_REGIONS, *cat.ZONES,
                   *(r for regions in optimized.ZONES.values() for r in regions)})


def covers(gpu: str, region: str) -> bool:
    """Whether a snapshot records where `gpu` is offered in `region`: the accelerator-
    optimized types everywhere, the zone snapshot's types in the regions it lists."""
    return optimized.regions_of(gpu) is not None or (
        gpu in cat.ZONED_ACCELERATORS and region in cat.ZONES)


def check_region(region: str, pools: Sequence[tuple[str, Mapping[str, Any]]],
                  errors: list[str], warnings: list[str]) -> None:
    """Region and zone rules for the GPU types the pools use."""
    used: dict[str, list[str]] = {}
    for name, pool in pools:
        gpu = pool.get("machine_spec", {}).get("accelerator_type")
        if gpu in cat.ACCELERATOR_TYPES:  # an unknown name is an error of its own already
            used.setdefault(gpu, []).append(name)
    if not used:
        return
    if region not in known_regions():
        near = did_you_mean(region, known_regions())
        if near:  # a typo, not a region without GPUs
            errors.append(f"region is {short(region)}{near}, which no GPU list here knows; "
                          f"GPU regions: {listed(GPU_REGIONS)}")
            return
    guide = [g for g in used if optimized.regions_of(g) is None]
    if guide and region not in GPU_REGIONS and not any(optimized.regions_of(g) for g in used):
        errors.append(f"region is {short(region)}, which offers no GPUs for training; GPU regions: "
                      f"{listed(GPU_REGIONS)}")
        return
    zones = offered_zones(region)
    # A type is checked where a snapshot covers it: the accelerator-optimized ones
    # everywhere, the zone snapshot's in the regions it lists.
    known = [g for g in used if covers(g, region)]
    unknown = [g for g in used if optimized.regions_of(g) is None and
               g not in cat.ZONED_ACCELERATORS]
    if unknown:
        warnings.append(f"region {region}: where Vertex AI offers {listed(unknown)} is not "
                        "recorded here; check the accelerators of the region on Vertex AI's "
                        "locations page (https://cloud.google.com/vertex-ai/docs/general/"
                        "locations) before the images are built")
    for gpu in guide:
        if gpu in cat.ZONED_ACCELERATORS and region not in GPU_REGIONS:
            errors.append(f"{listed(used[gpu])}: {gpu} is not offered in region {region}; GPU "
                          f"regions: {listed(GPU_REGIONS)}")
    missing = False
    for gpu in known:
        if not any(gpu in offered for offered in zones.values()):
            missing = True
            elsewhere = optimized.regions_of(gpu) or [
                r for r, zs in cat.ZONES.items() if any(gpu in z for z in zs.values())]
            source = f" ({optimized.SOURCE})" if optimized.regions_of(gpu) else ""
            errors.append(f"{listed(used[gpu])}: {gpu} is not offered in region {region}; regions "
                          f"offering it: {listed(elsewhere) or 'none recorded'}{source}")
    if missing:
        return
    if len(known) > 1:
        together = [z for z, offered in zones.items() if set(known) <= offered]
        if not together:
            per_zone = "; ".join(f"{z}: {listed(sorted(g for g in o if g in known))}"
                                 for z, o in sorted(zones.items()))
            errors.append(f"region {region}: the job uses {listed(known)}, which no single "
                          f"zone of {region} offers together ({per_zone}); all GPU types of a job "
                          "must be in one zone: use one GPU type, or another region")
    elif len(used) > 1 and region not in cat.ZONES:
        warnings.append(f"region {region}: the GPU types {listed(used)} must all be offered in "
                        "one zone of the region; zone data for this region is not recorded "
                        "here, so check it on Compute Engine's GPU regions and zones page")
