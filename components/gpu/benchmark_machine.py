"""The machine `gpu-pipeline benchmark` measures a configuration's GPU on: the training
machine's family with one GPU, and about the host's share of one GPU (the input pipeline
runs on those vCPUs), so one GPU's figures are paid for, not eight.

The GPU rules are `components.gpu.catalog`'s: an N1 machine takes 1 GPU only up to some
vCPUs (the GPU guide's table), A2/A3/G2 machines come with a fixed count. A3 Mega and A3
Ultra (H100 Mega, H200) and A4 come with 8 GPUs only: the benchmark runs there on one of
them, and the whole machine is billed.
"""

from __future__ import annotations

import dataclasses

from components.gpu import catalog as cat

#: Fixed-count families and their machines, from the catalog.
_FIXED = {**cat.A2_MACHINES, **cat.MODERN_MACHINES}


@dataclasses.dataclass(frozen=True)
class BenchmarkMachine:
    """Where the benchmark runs.

    Attributes:
        machine: The machine type.
        accelerator: The GPU type.
        gpus: GPUs the machine comes with (the benchmark uses one).
        why: Why this machine, for the user.
    """

    machine: str
    accelerator: str
    gpus: int
    why: str


def _family(machine: str) -> str:
    return machine.rsplit("-", 1)[0] + "-"


def benchmark_machine(machine: str, accelerator: str, count: int) -> BenchmarkMachine:
    """The machine of `machine`'s family with one `accelerator`, with the vCPUs per GPU
    nearest `machine`'s own (the machine itself when it has one GPU or its family has no
    one-GPU machine)."""
    if count == 1:
        return BenchmarkMachine(machine, accelerator, 1, "the training machine, with its one GPU")
    if machine in _FIXED:
        share = _FIXED[machine].vcpus / max(count, 1)
        ones = [name for name, spec in _FIXED.items()
                if name.startswith(_family(machine)) and spec.fixed_gpu == (accelerator, 1)]
        if not ones:
            return BenchmarkMachine(machine, accelerator, count,
                                    f"{machine} comes with {count} GPUs only: the benchmark "
                                    "uses one, and the whole machine is billed")
        best = min(ones, key=lambda n: (abs(_FIXED[n].vcpus - share), _FIXED[n].vcpus))
        return BenchmarkMachine(best, accelerator, 1,
                                f"{machine}'s family with one GPU ({_FIXED[best].vcpus} vCPUs; "
                                f"{machine} has {share:g} per GPU)")
    share = cat.N1_MACHINES[machine].vcpus / count if machine in cat.N1_MACHINES else 8
    ones = [name for name, gpus in cat.SEED_TABLE.items()
            if name.startswith(_family(machine)) and 1 in gpus.get(accelerator, ())]
    if not ones:
        return BenchmarkMachine(machine, accelerator, count,
                                f"no {_family(machine)}* machine takes one {accelerator}: "
                                "the benchmark uses one of its GPUs")
    best = min(ones, key=lambda n: (abs(cat.N1_MACHINES[n].vcpus - share),
                                    cat.N1_MACHINES[n].vcpus))
    return BenchmarkMachine(best, accelerator, 1,
                            f"{machine}'s family with one GPU ({cat.N1_MACHINES[best].vcpus} "
                            f"vCPUs; {machine} has {share:g} per GPU)")
