"""A Vertex AI worker pool, parsed once: `WorkerPool`, and its API form (`to_api`).

Pools arrive as the CustomJob API's mappings: from the config (checked by
`components.gpu.validation`, which normalises them), across KFP component boundaries, in
the job resources ListCustomJobs returns (REST's camelCase) and in gcpc's tuning op. They
are parsed here at those edges (`parse_pools`) and produced here (`to_api`, `api_specs`);
no code below reads a pool mapping.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Vertex AI's Reduction Server image (docs: "Reduction Server"): a pool 2 running it
#: speeds up MultiWorkerMirroredStrategy's all-reduce instead of holding parameters. The
#: docs name it under `us-docker.pkg.dev`; Artifact Registry serves the same path under
#: each of its multi-regions (`us`, `europe`, `asia`), and a job pulls fastest from the
#: one nearest its region, so the image is recognised under any `*-docker.pkg.dev` host.
REDUCTION_SERVER = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver"
_REDUCTION_SERVER_PATH = re.compile(
    r"[a-z0-9-]+-docker\.pkg\.dev/vertex-ai-restricted/training/reductionserver([:@].*)?")


@dataclasses.dataclass(frozen=True)
class WorkerPool:
    """One used worker pool of a CustomJob.

    Attributes:
        role: Its index in `worker_pool_specs`, which is its role on Vertex AI (0 chief,
            1 workers, 2 parameter servers or a Reduction Server, 3 evaluator).
        machine: The Compute Engine machine type.
        accelerator: The GPU type (`NVIDIA_TESLA_T4`), "" without GPUs.
        gpus_per_machine: GPUs on each replica, 0 without GPUs.
        replicas: The pool's machines.
        image: `container_spec.image_uri`, "" until the training step sets the trainer's.
        other: The API fields besides these (`disk_spec`, the rest of `container_spec`...),
            as JSON, kept as given.
        reservation: `machine_spec.reservation_affinity`: NO_RESERVATION, ANY_RESERVATION,
            a specific reservation's full resource name, or "" when not given (Vertex AI's
            default); `reserved` reads it.
    """

    role: int
    machine: str
    accelerator: str = ""
    gpus_per_machine: int = 0
    replicas: int = 1
    image: str = ""
    other: str = "{}"
    reservation: str = ""

    @classmethod
    def from_api(cls, spec: Mapping[str, Any], role: int) -> WorkerPool | None:
        """A pool from the API's mapping (snake_case or REST's camelCase); None for an
        unused pool (`{}`). Values that are not numbers count as 0, so that a pool not yet
        checked reads as unusable rather than failing here: the GPU rules say why."""
        if not isinstance(spec, Mapping) or not spec:
            return None
        machine_spec = _field(spec, "machine_spec")
        machine_spec = machine_spec if isinstance(machine_spec, Mapping) else {}
        gpus = _count(_field(machine_spec, "accelerator_count", 0))
        accelerator = str(_field(machine_spec, "accelerator_type", "") or "")
        if accelerator == "ACCELERATOR_TYPE_UNSPECIFIED" or not gpus:
            accelerator, gpus = "", 0
        container = _field(spec, "container_spec")
        container = dict(container) if isinstance(container, Mapping) else None
        image = str(_field(container, "image_uri", "") or "") if container else ""
        other = {_snake(key): value for key, value in spec.items()
                 if _snake(key) not in ("machine_spec", "replica_count")}
        if container is not None:
            container.pop("image_uri", None)
            container.pop("imageUri", None)
            other.pop("container_spec", None)
            if container:
                other["container_spec"] = container
        return cls(role, str(_field(machine_spec, "machine_type", "") or ""), accelerator,
                   gpus, _count(_field(spec, "replica_count", 1)), image, json.dumps(other),
                   _reservation(_field(machine_spec, "reservation_affinity")))

    @property
    def reserved(self) -> Any:
        """Its reservation (`components.gpu.reservations.Reservation`), None if not given."""
        from components.gpu.reservations import SPECIFIC, Reservation

        if not self.reservation:
            return None
        if self.reservation.startswith("projects/"):
            return Reservation(SPECIFIC, self.reservation)
        return Reservation(self.reservation)

    @property
    def reduction_server(self) -> bool:
        """Whether it runs Vertex AI's Reduction Server image (under any Artifact Registry
        host)."""
        return bool(_REDUCTION_SERVER_PATH.fullmatch(self.image))

    def describe(self) -> str:
        """`2 x n1-standard-8 + 1 x NVIDIA_TESLA_T4`."""
        gpus = f" + {self.gpus_per_machine} x {self.accelerator}" if self.accelerator else ""
        reserved = self.reserved
        held = f" on {reserved.words()}" if reserved and reserved.kind != "NO_RESERVATION" else ""
        return f"{self.replicas} x {self.machine}{gpus}{held}"

    def to_api(self) -> dict[str, Any]:
        """As the CustomJob API takes it (snake_case, as gcpc and the aiplatform client
        take dicts)."""
        machine_spec: dict[str, Any] = {"machine_type": self.machine}
        if self.accelerator:
            machine_spec.update(accelerator_type=self.accelerator,
                                accelerator_count=self.gpus_per_machine)
        if self.reserved:
            machine_spec["reservation_affinity"] = self.reserved.affinity()
        found: dict[str, Any] = {"machine_spec": machine_spec, "replica_count": self.replicas}
        other = json.loads(self.other)
        if self.image:
            other["container_spec"] = {"image_uri": self.image,
                                       **(other.get("container_spec") or {})}
        return {**found, **other}


def parse_pools(specs: Iterable[Mapping[str, Any]]) -> tuple[WorkerPool | None, ...]:
    """Worker pools in Vertex AI's order, None where a pool is unused."""
    return tuple(WorkerPool.from_api(spec, role) for role, spec in enumerate(specs))


def api_specs(pools: Sequence[WorkerPool | None]) -> list[dict[str, Any]]:
    """`worker_pool_specs` as the API takes them: `{}` for an unused pool, trailing
    unused pools dropped."""
    found = [pool.to_api() if pool else {} for pool in pools]
    while found and not found[-1]:
        found.pop()
    return found


def replicas(pools: Sequence[WorkerPool | None], role: int) -> int:
    """The replicas of the pool at `role`, 0 when it is unused or absent."""
    pool = pools[role] if role < len(pools) else None
    return pool.replicas if pool else 0


def _reservation(affinity: Any) -> str:
    """`WorkerPool.reservation` of a `reservation_affinity` (snake_case or camelCase); ""
    for none or one the GPU rules have not passed."""
    if not isinstance(affinity, Mapping):
        return ""
    kind = str(_field(affinity, "reservation_affinity_type", "") or "")
    values = affinity.get("values") or []
    if kind == "SPECIFIC_RESERVATION":
        return str(values[0]) if values else ""
    return kind if kind in ("ANY_RESERVATION", "NO_RESERVATION") else ""


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def _field(mapping: Mapping[str, Any] | None, name: str, default: Any = None) -> Any:
    """A field under its snake_case name or REST's camelCase one."""
    if not mapping:
        return default
    camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
    return mapping.get(name, mapping.get(camel, default))


def _count(value: Any) -> int:
    """A count as int (`as_int`), 0 when it is not one."""
    value = as_int(value)
    return value if is_int(value) else 0


def as_int(value: Any) -> Any:
    """Integral floats and digit strings become ints: KFP passes list parameters through
    protobuf Struct, whose numbers are all doubles (1 arrives as 1.0), and JSON APIs send
    int64 values as strings. Anything else is returned as is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    # ASCII digits only: str.isdigit() is also true of '²', which int() refuses.
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit() and len(text) <= 19:
        # The stripped text: str.strip() also drops control characters such as '\x1f',
        # which int() refuses (found by the random documents test).
        return int(text)
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
