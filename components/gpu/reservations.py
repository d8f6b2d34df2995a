"""Compute Engine reservations a training pool consumes: the `reservation` a config gives a
pool (or a fallback), as the CustomJob's `machine_spec.reservation_affinity`, and what a
reservation must hold for the pool to consume it.

Vertex AI's `ReservationAffinity` (v1 REST and `aiplatform_v1`): `reservation_affinity_type`
NO_RESERVATION (on-demand capacity only), ANY_RESERVATION (any reservation that fits,
falling back to on-demand) or SPECIFIC_RESERVATION, which names the reservation with `key`
"compute.googleapis.com/reservation-name" and `values` "the full resource name of the
reservation" (`projects/P/zones/Z/reservations/R`, or a block of it:
`.../reservationBlocks/B`). Vertex AI docs, "Use reservations with training/prediction":
"A reservation's VM properties must match exactly with your Vertex AI workload" (machine
type, GPUs), it "can't consume reservations of VMs that have Local SSD disks manually
attached", and a shared reservation is consumed from its owner project or a project it is
shared with. Compute Engine docs, "Choose a reservation type": reservations are zonal,
and reserved capacity cannot create Spot VMs; Flex-start is its own provisioning model
(Dynamic Workload Scheduler finds the capacity), so neither combines with a reservation.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from trainer.common.errors import InputError
from trainer.common.schema import short

KEY = "compute.googleapis.com/reservation-name"
ANY, NONE, SPECIFIC = "ANY_RESERVATION", "NO_RESERVATION", "SPECIFIC_RESERVATION"
TYPES = (NONE, ANY, SPECIFIC)
#: The scheduling strategies that cannot consume a reservation.
UNRESERVABLE = ("SPOT", "FLEX_START")

_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
_ZONE = r"[a-z]+-[a-z]+[0-9]+-[a-z]"
_PROJECT = r"[a-z](?:[-a-z0-9.:]{4,61}[a-z0-9])?"
FULL = re.compile(rf"projects/(?P<project>{_PROJECT})/zones/(?P<zone>{_ZONE})/reservations/"
                  rf"(?P<name>{_NAME})(?:/reservationBlocks/(?P<block>{_NAME}))?")
ZONED = re.compile(rf"(?P<zone>{_ZONE})/(?P<name>{_NAME})")
FORMS = ("any, none, ZONE/NAME (a reservation of the run's project, e.g. "
         "us-central1-a/h100-pool) or projects/PROJECT/zones/ZONE/reservations/NAME (another "
         "project's shared reservation; /reservationBlocks/BLOCK for one block of it)")


class ReservationError(InputError):
    """A reservation given in a form Vertex AI does not take."""


@dataclasses.dataclass(frozen=True)
class Reservation:
    """What a pool consumes: `kind` (NO_RESERVATION, ANY_RESERVATION or
    SPECIFIC_RESERVATION) and, for a specific one, its full resource `name`."""

    kind: str
    name: str = ""

    @property
    def zone(self) -> str:
        found = FULL.fullmatch(self.name)
        return found["zone"] if found else ""

    @property
    def project(self) -> str:
        found = FULL.fullmatch(self.name)
        return found["project"] if found else ""

    @property
    def reservation(self) -> str:
        """The reservation's own resource name (a block's reservation for a block)."""
        return self.name.split("/reservationBlocks/")[0]

    @property
    def holds_capacity(self) -> bool:
        """Whether the pool runs on reserved capacity for sure (a specific reservation; an
        ANY one may fall back to on-demand)."""
        return self.kind == SPECIFIC

    def words(self) -> str:
        """`reservation projects/p/zones/z/reservations/r`, `any reservation`..."""
        return {NONE: "no reservation", ANY: "any reservation"}.get(
            self.kind, f"reservation {self.name}")

    def affinity(self) -> dict[str, Any]:
        """As `machine_spec.reservation_affinity` (snake_case, as the client takes it)."""
        found: dict[str, Any] = {"reservation_affinity_type": self.kind}
        if self.kind == SPECIFIC:
            found.update(key=KEY, values=[self.name])
        return found


def parse(value: Any, project: str = "") -> Reservation:
    """A config's `reservation` (see FORMS); `ZONE/NAME` is completed with `project`.

    Raises:
        ReservationError: Not one of FORMS, or ZONE/NAME without a project.
    """
    text = value.strip() if isinstance(value, str) else None
    if text is None:
        raise ReservationError(f"is {short(value)}; expected {FORMS}")
    if text.lower() in ("any", "none"):
        return Reservation(ANY if text.lower() == "any" else NONE)
    if FULL.fullmatch(text):
        return Reservation(SPECIFIC, text)
    zoned = ZONED.fullmatch(text)
    if zoned and not project:
        raise ReservationError(
            f"is {text!r}, a reservation of the run's project, but vertex.project is empty: "
            f"set vertex.project, or give projects/PROJECT/zones/{zoned['zone']}/reservations/"
            f"{zoned['name']}")
    if zoned:
        return Reservation(SPECIFIC, f"projects/{project}/zones/{zoned['zone']}/reservations/"
                                     f"{zoned['name']}")
    raise ReservationError(f"is {short(value)}; expected {FORMS}")


def completed(value: Any, project: str) -> Any:
    """A config's `reservation` with `ZONE/NAME` completed to the full resource name in
    `project` (when known); anything else as given, for `parse` to judge."""
    zoned = ZONED.fullmatch(value.strip()) if isinstance(value, str) else None
    if zoned and project:
        return f"projects/{project}/zones/{zoned['zone']}/reservations/{zoned['name']}"
    return value


def consuming(spec: Mapping[str, Any], value: Any, project: str = "") -> dict[str, Any]:
    """A worker pool spec that consumes `value` (a config's `reservation`), as the API
    takes it (`machine_spec.reservation_affinity`); a malformed one as given, in
    `reservation`, for the GPU rules to name."""
    machine_spec = {k: v for k, v in spec["machine_spec"].items()
                    if k != "reservation_affinity"}
    rest = {k: v for k, v in spec.items() if k != "reservation"}
    try:
        return {**rest, "machine_spec": {**machine_spec,
                                         "reservation_affinity": parse(value, project)
                                         .affinity()}}
    except ReservationError:
        return {**rest, "reservation": value, "machine_spec": machine_spec}


def with_reservation(specs: list[Any], value: Any) -> list[Any]:
    """Worker pool specs whose GPU pools consume `value` (a config's `reservation`) instead
    of what they gave: a fallback's `reservation` over the pools it runs."""
    return [consuming(spec, value) if isinstance(spec, Mapping)
            and isinstance(spec.get("machine_spec"), Mapping)
            and spec["machine_spec"].get("accelerator_type") else spec for spec in specs]


def from_affinity(affinity: Any) -> Reservation:
    """A `reservation_affinity` (snake_case or REST's camelCase), checked as Vertex AI
    checks it.

    Raises:
        ReservationError: Its type is missing or unknown, a specific one lacks the key or
            one full resource name, or another type carries them.
    """
    if not isinstance(affinity, Mapping):
        raise ReservationError(f"is {short(affinity)}; expected a mapping with "
                               "reservation_affinity_type")
    kind = affinity.get("reservation_affinity_type", affinity.get("reservationAffinityType"))
    key, values = affinity.get("key", ""), list(affinity.get("values") or [])
    if kind not in TYPES:
        raise ReservationError(f"has reservation_affinity_type {short(kind)}; expected one of "
                               f"{', '.join(TYPES)}")
    if kind != SPECIFIC:
        if key or values:
            raise ReservationError(f"is {kind} with key or values; only "
                                   f"{SPECIFIC} names a reservation")
        return Reservation(kind)
    if key != KEY:
        raise ReservationError(f"is {SPECIFIC} with key {short(key)}; expected {KEY!r}")
    if len(values) != 1 or not isinstance(values[0], str) or not FULL.fullmatch(values[0]):
        raise ReservationError(
            f"is {SPECIFIC} with values {short(values)}; expected one full resource name, "
            "projects/PROJECT/zones/ZONE/reservations/NAME[/reservationBlocks/BLOCK]")
    return Reservation(SPECIFIC, values[0])


def compute_gpu_name(accelerator: str) -> str:
    """Compute Engine's name of a Vertex AI GPU type (NVIDIA_TESLA_T4 -> nvidia-tesla-t4,
    NVIDIA_H100_MEGA_80GB -> nvidia-h100-mega-80gb)."""
    return accelerator.lower().replace("_", "-")


def _count(value: Any) -> int:
    try:
        return int(value or 0)  # Compute Engine's REST sends int64 as strings
    except (TypeError, ValueError):
        return 0


def unused(found: Mapping[str, Any]) -> int:
    """The instances of a Compute Engine reservation (REST) nothing consumes now."""
    specific = found.get("specificReservation") or {}
    return max(0, _count(specific.get("count")) - _count(specific.get("inUseCount")))


def mismatches(found: Mapping[str, Any], reservation: Reservation, machine: str,
               accelerator: str, gpus: int, region: str, project: str) -> list[str]:
    """Why a pool cannot consume a reservation (`found`, Compute Engine's REST resource),
    one line each naming both sides: its zone outside the job's region, another machine
    type, other GPUs, Local SSDs attached, Vertex AI not allowed to consume it, or another
    project's reservation not shared with the run's project."""
    problems = []
    zone = str(found.get("zone", "")).rsplit("/", 1)[-1] or reservation.zone
    if zone.rsplit("-", 1)[0] != region:
        problems.append(f"{reservation.words()} is in zone {zone}, the job runs in region "
                        f"{region}")
    properties = (found.get("specificReservation") or {}).get("instanceProperties") or {}
    reserved = str(properties.get("machineType", "")).rsplit("/", 1)[-1]
    if reserved != machine:
        problems.append(f"{reservation.words()} reserves {reserved or 'no machine type'}, "
                        f"the pool runs {machine}")
    given = {str(g.get("acceleratorType", "")).rsplit("/", 1)[-1]: _count(g.get(
        "acceleratorCount")) for g in properties.get("guestAccelerators") or []}
    # An accelerator-optimized machine type carries its GPUs: a reservation of it may list
    # none, and then the machine type says them.
    if given and given != ({compute_gpu_name(accelerator): gpus} if accelerator else {}):
        held = ", ".join(f"{n} x {t}" for t, n in given.items())
        problems.append(f"{reservation.words()} reserves {held}, the pool runs "
                        + (f"{gpus} x {compute_gpu_name(accelerator)}" if accelerator
                           else "no GPUs"))
    if properties.get("localSsds"):
        problems.append(f"{reservation.words()} reserves Local SSDs, which Vertex AI cannot "
                        "consume (Vertex AI docs: \"Use reservations\")")
    sharing = (found.get("reservationSharingPolicy") or {}).get("serviceShareType", "")
    if sharing != "ALLOW_ALL":
        problems.append(f"{reservation.words()} does not let Google Cloud services consume it "
                        f"(reservationSharingPolicy.serviceShareType is "
                        f"{sharing or 'DISALLOW_ALL, the default'}): update it with "
                        "--reservation-sharing-policy=ALLOW_ALL")
    owner = reservation.project
    shared = (found.get("shareSettings") or {}).get("projectMap") or {}
    if owner and project and owner != project and project not in shared:
        problems.append(f"{reservation.words()} belongs to project {owner} and is not shared "
                        f"with {project}")
    return problems
