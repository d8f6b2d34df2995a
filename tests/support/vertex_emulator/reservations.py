"""Compute Engine's reservations, as the run reads them, and Vertex AI's rules for a
CustomJob that consumes one.

Compute Engine REST, `reservations.get`: `GET /compute/v1/projects/P/zones/Z/reservations/
R`, the resource with `specificReservation` (`count`, `inUseCount` as int64 strings,
`instanceProperties.machineType`, `guestAccelerators`, `localSsds`), `zone` and
`selfLink` as URLs, `specificReservationRequired`, `reservationSharingPolicy` and
`shareSettings`; a name it does not hold answers 404 with Compute Engine's error ("The
resource '...' was not found", reason `notFound`).

A CustomJob's `machineSpec.reservationAffinity` is refused (400 INVALID_ARGUMENT, in the
emulator's words) where the API's reference and Compute Engine's docs rule it out: a type
outside the enum or unspecified (the field is "Required"); a
SPECIFIC_RESERVATION without the key `compute.googleapis.com/reservation-name` or without
exactly one value that is a reservation's full resource name; and, as Compute Engine's
reservations cannot create Spot VMs and Flex-start provisions its own capacity, a
reservation with scheduling strategy SPOT or FLEX_START. Google's REST clients send the
enums as numbers, gcpc and users' JSON as names: both are read.
"""

from __future__ import annotations

from typing import Any

from components.gpu.reservations import FULL, KEY, SPECIFIC, TYPES

COMPUTE = "https://www.googleapis.com/compute/v1"


def reservation(project: str, zone: str, name: str, *, machine: str, count: int,
                in_use: int = 0, gpus: tuple[str, int] | None = None,
                sharing: str = "ALLOW_ALL", shared_with: tuple[str, ...] = ()
                ) -> dict[str, Any]:
    """A Compute Engine reservation resource as `reservations.get` answers it."""
    properties: dict[str, Any] = {"machineType": machine}
    if gpus:
        properties["guestAccelerators"] = [{"acceleratorType": gpus[0],
                                            "acceleratorCount": gpus[1]}]
    found = {"kind": "compute#reservation", "id": str(abs(hash(name)) % 10**18),
             "name": name, "zone": f"{COMPUTE}/projects/{project}/zones/{zone}",
             "selfLink": f"{COMPUTE}/projects/{project}/zones/{zone}/reservations/{name}",
             "specificReservation": {"count": str(count), "inUseCount": str(in_use),
                                     "assuredCount": str(count),
                                     "instanceProperties": properties},
             "specificReservationRequired": True, "status": "READY",
             "reservationSharingPolicy": {"serviceShareType": sharing},
             "shareSettings": {"shareType": "SPECIFIC_PROJECTS" if shared_with else "LOCAL"}}
    if shared_with:
        found["shareSettings"]["projectMap"] = {p: {"projectId": p} for p in shared_with}
    return found


class ReservationService:
    """The project's reservations by full name (`projects/P/zones/Z/reservations/R`)."""

    def __init__(self) -> None:
        self.reservations: dict[str, dict[str, Any]] = {}

    def add(self, resource: dict[str, Any]) -> str:
        """Holds a `reservation` resource; returns its full name."""
        name = resource["selfLink"].split("/compute/v1/", 1)[1]
        self.reservations[name] = resource
        return name

    def routes(self) -> list[tuple[str, str, Any]]:
        return [("GET", r"^/compute/v1/(projects/[^/]+/zones/[^/]+/reservations/[^/]+)$",
                 self._get)]

    def _get(self, name: str, body: Any, query: Any) -> tuple[int, Any]:
        if name in self.reservations:
            return 200, self.reservations[name]
        message = f"The resource '{name}' was not found"
        return 404, {"error": {"code": 404, "message": message, "errors": [
            {"message": message, "domain": "global", "reason": "notFound"}]}}


def affinity_refusal(job_spec: dict[str, Any]) -> str:
    """Why Vertex AI refuses the job's reservation affinities ("" when it does not)."""
    from google.cloud import aiplatform_v1

    strategy = (job_spec.get("scheduling") or {}).get("strategy")
    if isinstance(strategy, int):
        strategy = aiplatform_v1.Scheduling.Strategy(strategy).name
    for index, pool in enumerate(job_spec.get("workerPoolSpecs") or []):
        affinity = ((pool or {}).get("machineSpec") or {}).get("reservationAffinity")
        if affinity is None:
            continue
        kind = affinity.get("reservationAffinityType")
        if isinstance(kind, int):
            kind = aiplatform_v1.ReservationAffinity.Type(kind).name
        where = f"worker_pool_specs[{index}].machine_spec.reservation_affinity"
        if kind not in TYPES:
            return f"{where}.reservation_affinity_type is required (emulated wording)"
        values = affinity.get("values") or []
        if kind == SPECIFIC and (affinity.get("key") != KEY or len(values) != 1
                                 or not FULL.fullmatch(str(values[0]))):
            return (f"{where}: a SPECIFIC_RESERVATION needs key {KEY} and the full resource "
                    "name of the reservation as its value (emulated wording)")
        if kind != "NO_RESERVATION" and strategy in ("SPOT", "FLEX_START"):
            return (f"{where}: {kind} cannot be used with scheduling strategy {strategy} "
                    "(emulated wording)")
    return ""
