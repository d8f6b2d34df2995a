"""Where Compute Engine offers the accelerator-optimized GPUs, zone by zone: the machine
families Vertex AI runs A100 80GB, H100, H100 Mega, H200, B200 and L4 on.

Source: Compute Engine's machine types per zone (`gcloud compute machine-types list`, as
published in skypilot-org/skypilot-catalog `catalogs/v7/gcp/vms.csv`, commit 017e2502),
read 2026-11-26: a2-ultragpu (A100 80GB), a3-highgpu (H100), a3-megagpu (H100 Mega),
a3-ultragpu (H200) and g2-standard (L4); and `catalogs/v8/gcp/vms.csv`, commit 006059e0,
read 2026-11-27: a4-highgpu (B200; its a3-ultragpu zones are the same as v7's). These
are Compute Engine's zones; Vertex AI's training locations are at most these (its
locations page's table could not be read here). GB200 (a4x) is in neither snapshot: where
it is offered is not recorded. Pure data.
"""

from __future__ import annotations

from components.gpu.catalog import A100_80GB, B200, H100_80GB, H100_MEGA, H200, L4

SOURCE = ("Compute Engine's machine types per zone (skypilot-org/skypilot-catalog "
          "catalogs/v7/gcp/vms.csv, commit 017e2502, read 2026-11-26; B200: catalogs/v8/gcp/"
          "vms.csv, commit 006059e0, read 2026-11-27)")


def _zones(text: str) -> dict[str, tuple[str, ...]]:
    """`region:abc region:ab` -> {region: (region-a, region-b, region-c), ...}."""
    found = {}
    for item in text.split():
        region, letters = item.split(":")
        found[region] = tuple(f"{region}-{letter}" for letter in letters)
    return found


#: GPU type -> region -> the zones offering it.
ZONES: dict[str, dict[str, tuple[str, ...]]] = {
    A100_80GB: _zones("asia-southeast1:c europe-west4:a us-central1:ac us-east4:c "
                      "us-east5:ab"),
    H100_80GB: _zones("asia-east1:c asia-northeast1:b asia-south1:c asia-southeast1:bc "
                      "australia-southeast1:c europe-north1:c europe-west1:bc europe-west3:c "
                      "europe-west4:bc europe-west8:c us-central1:abc us-east4:abc us-east5:a "
                      "us-west1:ab us-west4:a"),
    H100_MEGA: _zones("asia-east1:c asia-northeast1:b asia-southeast1:bc "
                      "australia-southeast1:c europe-north1:c europe-west1:bc europe-west3:c "
                      "europe-west4:bc us-central1:abc us-east4:abc us-east5:a us-west1:ab "
                      "us-west4:a"),
    H200: _zones("asia-south1:b asia-south2:c europe-west1:b europe-west4:a us-central1:b "
                 "us-east4:b us-east5:a us-south1:b us-west1:c"),
    B200: _zones("asia-northeast1:b asia-southeast1:b europe-north1:b europe-west4:b "
                 "us-central1:b us-east1:b us-east4:b us-south1:b us-west2:c us-west3:bc"),
    L4: _zones("asia-east1:abc asia-northeast1:abc asia-northeast3:ab asia-south1:abc "
               "asia-southeast1:abc europe-west1:bc europe-west2:ab europe-west3:ab "
               "europe-west4:abc europe-west6:bc me-central2:ac northamerica-northeast1:b "
               "northamerica-northeast2:ab us-central1:abc us-east1:bcd us-east4:ac "
               "us-west1:abc us-west4:ac"),
}


def regions_of(gpu: str) -> list[str] | None:
    """The regions offering `gpu`, or None when this snapshot does not cover the type."""
    return sorted(ZONES[gpu]) if gpu in ZONES else None
