"""Which catalog SKU bills which part of a machine, GPU or node, on the documented parts of
its description only.

Vertex AI bills an on-demand training job on its own SKUs (Cloud Billing service
`C7E2-9256-1C43`), one per GPU type and one per machine family's cores and RAM: "Vertex AI:
Training/Pipelines on NVIDIA H100 80GB in Iowa", "... on A3 Instance Core in Iowa", "... on
A3 Instance RAM in Iowa", "... on N1 Predefined Instance Core running in ...". A Spot or a
DWS Flex-start job is billed on Compute Engine's SKUs (service `6F81-5844-456A`: "Nvidia
Tesla T4 GPU attached to Spot Preemptible VMs running in ...", "Nvidia H100 80GB GPU
attached to DWS Defined Duration VMs running in Americas", "DWS Defined Duration A3 Core
running in Americas") plus Vertex AI's management-fee SKUs ("Vertex AI: Training/Pipelines
management fee on NVIDIA H100 80GB in Iowa", also spelt "Management fee"). Prediction nodes:
"Vertex AI: Online/Batch Prediction ..." [Vertex AI pricing, custom-trained models: Spot
VMs and reservations are billed as Compute Engine plus a management fee; a public billing
export of an a3-highgpu-8g job, zenn.dev (2025-08), lists the SKUs above with their ids].

A description is never matched as a guessed sentence: its kind (the prefix), the GPU's
name or the machine family and the resource (core or RAM) are matched as words, case
aside, the region by the SKU's `serviceRegions`, and its category where given
(`resourceGroup` GPU for a GPU, another for cores and RAM; a `usageType` of a commitment
never, a preemptible one only for Spot). Two SKUs for one part is an error naming both,
never a pick.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any

from components.gpu import catalog as cat
from trainer.common.errors import InputError

VERTEX_AI = "C7E2-9256-1C43"
COMPUTE_ENGINE = "6F81-5844-456A"

#: A SKU's kind, from its description's documented prefix or phrase.
_KINDS = {
    "training": lambda d: re.match(r"vertex ai: training(/pipelines)? on ", d),
    "fee": lambda d: re.match(r"vertex ai: training(/pipelines)? management fee on ", d),
    "prediction": lambda d: re.match(r"vertex ai: online/batch prediction ", d)
    and "management fee" not in d,
    "spot": lambda d: "spot preemptible" in d,
    "flex": lambda d: "dws defined duration" in d,
}
#: The SKUs of each pricing (a `vertex.prices` key's prefix): every part must be found.
#: A pool on a specific reservation (`RESERVED`) adds only the fee: its machines and GPUs
#: are the reservation's, billed whether used or not.
PARTS = {"": ("training",), "SPOT": ("spot", "fee"), "FLEX_START": ("flex", "fee"),
         "RESERVED": ("fee",), "PREDICTION": ("prediction",)}
#: Words of SKUs no job of this project is billed on: committed use, custom shapes, sole
#: tenancy, extended memory, virtual workstations, reservations.
_NEVER = {"commitment", "commit", "custom", "sole", "extended", "workstation", "reserved"}

#: Each GPU type's words in SKU descriptions: (all of these, none of these).
GPU_WORDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    cat.K80: (frozenset({"k80"}), frozenset()),
    cat.P4: (frozenset({"p4"}), frozenset()),
    cat.P100: (frozenset({"p100"}), frozenset()),
    cat.T4: (frozenset({"t4"}), frozenset()),
    cat.V100: (frozenset({"v100"}), frozenset()),
    cat.A100: (frozenset({"a100"}), frozenset({"80gb"})),
    cat.A100_80GB: (frozenset({"a100", "80gb"}), frozenset()),
    cat.L4: (frozenset({"l4"}), frozenset()),
    cat.H100_80GB: (frozenset({"h100"}), frozenset({"mega"})),
    cat.H100_MEGA: (frozenset({"h100", "mega"}), frozenset()),
    cat.H200: (frozenset({"h200"}), frozenset()),
    cat.B200: (frozenset({"b200"}), frozenset()),
    cat.GB200: (frozenset({"gb200"}), frozenset()),
}
#: A machine family's word in SKU descriptions (a family and its qualifier written together:
#: "A3 Ultra" and "A3Ultra" are both `a3ultra`), by machine-type prefix; A3 Mega's SKUs are
#: also named A3Plus.
FAMILY_WORDS: dict[str, tuple[str, ...]] = {
    "n1": ("n1",), "n2": ("n2",), "e2": ("e2",), "g2": ("g2",),
    "a2-highgpu": ("a2",), "a2-megagpu": ("a2",), "a2-ultragpu": ("a2ultra",),
    "a3-highgpu": ("a3",), "a3-megagpu": ("a3mega", "a3plus"), "a3-ultragpu": ("a3ultra",),
    "a4-highgpu": ("a4",), "a4x-highgpu": ("a4x",),
}
_RESOURCE_WORDS = {"CORE": {"core", "vcpu", "cpu"}, "RAM": {"ram", "memory"}}
#: Hourly units a price can be read in (per hour, per GiB-hour).
HOURLY_UNITS = ("h", "GiBy.h", "GBy.h")


def words(description: str) -> set[str]:
    """A description's words, lower case, with a family and its qualifier as one word."""
    text = re.sub(r"\b([a-z]\d)\s+(ultra|mega|plus)\b", r"\1\2", description.lower())
    return set(re.findall(r"[a-z0-9]+", text))


def family_of(machine: str) -> str | None:
    """The family (a FAMILY_WORDS key) whose SKUs price a machine type, None if none."""
    prefix = machine.split("-", 1)[0]
    for family in (machine.rsplit("-", 1)[0], prefix):
        if family in FAMILY_WORDS:
            return family
    return None


@dataclasses.dataclass(frozen=True)
class Sku:
    """One catalog SKU, as much of it as pricing needs.

    Attributes:
        sku_id: Its id ("3F95-001E-B747").
        description: Its description.
        regions: Its `serviceRegions`.
        unit: Its price's usage unit ("h", "GiBy.h").
        usd: USD per unit (the newest price's last tier).
        service: Its service id.
        group: Its `category.resourceGroup` ("GPU", "CPU", "RAM", "N1Standard"...), "" if
            not given.
        usage: Its `category.usageType` ("OnDemand", "Preemptible", "Commit1Yr"...), ""
            if not given.
    """

    sku_id: str
    description: str
    regions: tuple[str, ...]
    unit: str
    usd: float
    service: str = ""
    group: str = ""
    usage: str = ""

    def kind(self) -> str:
        """Its kind (a `_KINDS` key), "" when it is none of them."""
        text = self.description.lower()
        return next((kind for kind, test in _KINDS.items() if test(text)), "")


class AmbiguousSku(InputError):
    """Two or more SKUs match one part: the message names them (`vertex.prices` settles
    it: `price_list.AmbiguousPriceError` says so)."""


@dataclasses.dataclass(frozen=True)
class Found:
    """A priced type: USD an hour and the SKU ids it was read from."""

    usd: float
    skus: tuple[str, ...]


def _category_fits(sku: Sku, kind: str, gpu: bool) -> bool:
    """What the SKU's category allows: never a commitment's usage; a GPU part only from
    the GPU resource group, a machine's cores and RAM never from it; an on-demand, Flex-start
    or management-fee part never from a preemptible usage. A Spot part's usage is not
    read: the catalog lists some Spot SKUs as OnDemand ("Spot Preemptible A4 Nvidia B200
    (1 gpu slice) ..."), and their description says what they are."""
    if sku.usage.startswith("Commit"):
        return False
    if sku.group and (sku.group == "GPU") != gpu:
        return False
    return kind == "spot" or sku.usage != "Preemptible"


def _matches(sku: Sku, kind: str, resource: str, region: str) -> bool:
    if region not in sku.regions or sku.unit not in HOURLY_UNITS or sku.kind() != kind:
        return False
    found = words(sku.description)
    if found & _NEVER or not _category_fits(sku, kind, resource in GPU_WORDS):
        return False
    if resource in GPU_WORDS:
        wanted, unwanted = GPU_WORDS[resource]
        return wanted <= found and not found & unwanted and not found & (
            _RESOURCE_WORDS["CORE"] | _RESOURCE_WORDS["RAM"])
    part, _, family = resource.partition(":")
    return bool(found & _RESOURCE_WORDS[part]) and any(
        name in found for name in FAMILY_WORDS[family])


def one(skus: Iterable[Sku], kind: str, resource: str, region: str) -> Sku | None:
    """The SKU of `kind` billing `resource` (a GPU type, or CORE:<family> / RAM:<family>) in
    `region`, None when there is none.

    Raises:
        AmbiguousSku: More than one matches.
    """
    found = [sku for sku in skus if _matches(sku, kind, resource, region)]
    if len(found) > 1:
        raise AmbiguousSku(" and ".join(f"{s.sku_id} ({s.description!r})" for s in found))
    return found[0] if found else None


def price_region(skus: Sequence[Sku], region: str) -> tuple[dict[str, Found], dict[str, str]]:
    """Every GPU type and machine family's cores and RAM in `region`, for each pricing:
    (found, by `vertex.prices` key: USD an hour (a family's cores per vCPU, its RAM per GB),
    every part of its pricing found; ambiguous, by key: the SKUs that match one part)."""
    by_kind: dict[str, list[Sku]] = {}
    for sku in skus:
        if region in sku.regions:
            by_kind.setdefault(sku.kind(), []).append(sku)
    resources = [*GPU_WORDS, *(f"{part}:{family}" for family in FAMILY_WORDS
                               for part in _RESOURCE_WORDS)]
    found: dict[str, Found] = {}
    ambiguous: dict[str, str] = {}
    for pricing, kinds in PARTS.items():
        for resource in resources:
            key = f"{pricing}:{resource}" if pricing else resource
            try:
                parts = [one(by_kind.get(kind, []), kind, resource, region) for kind in kinds]
            except AmbiguousSku as exc:
                ambiguous[key] = str(exc)
                continue
            if all(parts):
                found[key] = Found(round(sum(p.usd for p in parts if p), 10),
                                   tuple(p.sku_id for p in parts if p))
    return found, ambiguous


def from_message(sku: Any, service: str = "") -> Sku | None:
    """A Sku from the catalog's `google.cloud.billing.v1.Sku` protobuf message (the raw
    message: proto-plus's wrappers and a dict of every field cost 0.3 s per 5,000 SKUs, and
    Compute Engine lists tens of thousands), None when it has no price."""
    if not sku.pricing_info:
        return None
    expression = sku.pricing_info[-1].pricing_expression
    if not expression.tiered_rates:
        return None
    price = expression.tiered_rates[-1].unit_price
    return Sku(sku.sku_id, sku.description, tuple(sku.service_regions),
               expression.usage_unit, price.units + price.nanos / 1e9, service,
               sku.category.resource_group, sku.category.usage_type)
