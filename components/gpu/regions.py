"""Region and zone rules for the GPU types of a job's pools: the region offers each type,
and one zone offers them all together. Where each type is offered is read from Compute
Engine's zones: the GPU guide's types from `accelerator_zones` (every region, 2026), the
accelerator-optimized ones from `optimized_zones`; a refusal lists every region that offers
the type. A region outside the GPU guide's list that Compute Engine's zones offer the type
in gets a warning; a type nothing here records, a warning too, not a refusal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from components.gpu import accelerator_zones as guide_zones
from components.gpu import catalog as cat
from components.gpu import optimized_zones as optimized
from trainer.common.schema import short
from trainer.common.suggest import did_you_mean

GPU_REGIONS = cat.GPU_REGIONS


def listed(values: Iterable[Any]) -> str:
    """Values joined for a message: `a, b, c` (the GPU checks' one spelling)."""
    return ", ".join(str(v) for v in values)


def offered_zones(region: str) -> dict[str, set[str]]:
    """The GPU types each zone of `region` offers, as far as the zone data knows."""
    zones = {zone: set(offered) for zone, offered in guide_zones.zones().get(region, {}).items()}
    for gpu, regions in optimized.ZONES.items():
        for zone in regions.get(region, ()):
            zones.setdefault(zone, set()).add(gpu)
    return zones


def regions_offering(gpu: str) -> list[str] | None:
    """The regions with a zone offering `gpu`; None for a type no zone data holds."""
    found = optimized.regions_of(gpu)
    if found is not None:
        return found
    return guide_zones.regions_of(gpu) if gpu in guide_zones.ZONED else None


def source_of(gpu: str) -> str:
    """Where a type's zones come from, for a message."""
    return optimized.SOURCE if optimized.regions_of(gpu) is not None else guide_zones.SOURCE


def known_regions() -> list[str]:
    """Every region a GPU list here names (the GPU guide's, the zone data's)."""
    return sorted({*GPU_REGIONS, *guide_zones.zones(),
                   *(r for regions in optimized.ZONES.values() for r in regions)})


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
        # A letter or two off (us-centrl1), not another real region (africa-south1).
        near = did_you_mean(region, known_regions(), cutoff=0.9)
        if near:  # a typo, not a region without GPUs
            errors.append(f"region is {short(region)}{near}, which no GPU list here knows; "
                          f"GPU regions: {listed(known_regions())}")
            return
    zones = offered_zones(region)
    if not zones and region not in GPU_REGIONS:
        errors.append(f"region is {short(region)}, which offers no GPUs for training; GPU regions: "
                      f"{listed(known_regions())}")
        return
    known = [g for g in used if regions_offering(g) is not None]
    unknown = [g for g in used if regions_offering(g) is None]
    if unknown:
        warnings.append(f"region {region}: where Vertex AI offers {listed(unknown)} is not "
                        "recorded here; check the accelerators of the region on Vertex AI's "
                        "locations page (https://cloud.google.com/vertex-ai/docs/general/"
                        "locations) before the images are built")
    missing = False
    for gpu in known:
        if not any(gpu in offered for offered in zones.values()):
            missing = True
            errors.append(f"{listed(used[gpu])}: {gpu} is not offered in region {region}; regions "
                          f"offering it: {listed(regions_offering(gpu)) or 'none recorded'} "
                          f"({source_of(gpu)})")
    if missing:
        return
    outside = [g for g in known if g in guide_zones.ZONED]
    if outside and region not in GPU_REGIONS:
        warnings.append(f"region {region} is not among the GPU guide's GPU regions; Compute "
                        f"Engine offers {listed(outside)} there ({guide_zones.SOURCE}): Vertex "
                        "AI's training may not, so check its locations page "
                        "(https://cloud.google.com/vertex-ai/docs/general/locations)")
    if len(known) > 1:
        together = [z for z, offered in zones.items() if set(known) <= offered]
        if not together:
            per_zone = "; ".join(f"{z}: {listed(sorted(g for g in o if g in known))}"
                                 for z, o in sorted(zones.items()))
            errors.append(f"region {region}: the job uses {listed(known)}, which no single "
                          f"zone of {region} offers together ({per_zone}); all GPU types of a job "
                          "must be in one zone: use one GPU type, or another region")
    elif len(used) > 1 and not zones:
        warnings.append(f"region {region}: the GPU types {listed(used)} must all be offered in "
                        "one zone of the region; zone data for this region is not recorded "
                        "here, so check it on Compute Engine's GPU regions and zones page")
