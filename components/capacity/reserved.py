"""Whether a configuration's reservations can hold it: each specific reservation a pool
names, read from Compute Engine (`reservations.get`, REST `GET compute/v1/projects/P/zones/
Z/reservations/R` with the run's credentials; permission `compute.reservations.get`), held
against the pools that consume it (`components.gpu.reservations.mismatches`) and against
the instances it has unused.

`submit` refuses the primary configuration when a reservation cannot hold it and warns of
a fallback's; the training step skips a configuration whose reservation is full when its
turn comes, and tries the next (`components.capacity.vertex_launch`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from components.gpu.alternatives import Alternative
from components.gpu.reservations import Reservation, mismatches, unused
from trainer.common.errors import InputError

#: Compute Engine's API (its REST root; tests point the session elsewhere).
COMPUTE_ENDPOINT = "https://compute.googleapis.com"


class ReservationUnfitError(InputError):
    """A configuration's reservation cannot hold it."""


@dataclasses.dataclass(frozen=True)
class Held:
    """What one reservation holds for one configuration: the lines that say why it cannot
    (`wrong`: it never could; `short`: not now, too few instances unused), else none."""

    reservation: Reservation
    wrong: tuple[str, ...]
    short: str

    @property
    def fits(self) -> bool:
        return not self.wrong and not self.short


def url(name: str, endpoint: str = COMPUTE_ENDPOINT) -> str:
    """The REST URL of a reservation (a block's reservation for a block)."""
    reservation = name.split("/reservationBlocks/")[0]
    return f"{endpoint.rstrip('/')}/compute/v1/{reservation}"


def reader(session: Any, endpoint: str = COMPUTE_ENDPOINT) -> Callable[[str], Mapping[str, Any]]:
    """Reads a reservation by its full name through an authorized HTTP session.

    The reader raises ReservationUnfitError for a reservation Compute Engine does not
    know (404) or does not show the caller (403), and OSError when it cannot answer.
    """
    def read(name: str) -> Mapping[str, Any]:
        answer = session.get(url(name, endpoint), timeout=30)
        if answer.status_code in (403, 404):
            reason = "does not exist" if answer.status_code == 404 else \
                "cannot be read with these credentials (compute.reservations.get)"
            raise ReservationUnfitError(f"reservation {name} {reason}")
        if answer.status_code != 200:
            raise OSError(f"Compute Engine answered {answer.status_code} for reservation "
                          f"{name}")
        return answer.json()
    return read


def held(alternative: Alternative, read: Callable[[str], Mapping[str, Any]],
         project: str) -> list[Held]:
    """Each specific reservation of the configuration against the pools that consume it:
    their machine shape, region and sharing, and their replicas together against its
    unused instances.

    Raises:
        ReservationUnfitError: A reservation does not exist or cannot be read.
    """
    consumers: dict[str, list[Any]] = defaultdict(list)
    for pool in alternative.pools:
        if pool and pool.reserved and pool.reserved.holds_capacity:
            consumers[pool.reserved.name].append(pool)
    found = []
    for name, pools in consumers.items():
        reservation = pools[0].reserved
        resource = read(name)
        wrong: list[str] = []
        for pool in pools:
            wrong += [w for w in mismatches(resource, reservation, pool.machine,
                                            pool.accelerator, pool.gpus_per_machine,
                                            alternative.region, project) if w not in wrong]
        needed, free = sum(pool.replicas for pool in pools), unused(resource)
        total = int((resource.get("specificReservation") or {}).get("count") or 0)
        short = "" if free >= needed else (
            f"{reservation.words()} has {free} of its {total} instance(s) unused; "
            f"{alternative.label} needs {needed} (" + ", ".join(
                pool.describe() for pool in pools) + ")")
        found.append(Held(reservation, tuple(wrong), short))
    return found


def why_not(alternative: Alternative, read: Callable[[str], Mapping[str, Any]],
            project: str) -> str:
    """Why the configuration cannot run on its reservations now ("" when it can, or when
    it names none), in one line: the training step's check before each try."""
    found = held(alternative, read, project)
    return "; ".join([*(w for h in found for w in h.wrong), *(h.short for h in found if h.short)])
