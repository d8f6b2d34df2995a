"""The facts the GPU validator checks against, each with where it comes from.

"The GPU guide" is AI Platform Training's "Using GPUs for training models in the cloud"
(https://cloud.google.com/ai-platform/training/docs/using-gpus), where this project's GPU
rules come from (its current text, where translations of older ones differ). Facts marked
BEYOND THE GPU GUIDE come from elsewhere and say so. Pure data, no imports beyond the
standard library.
"""

from __future__ import annotations

import dataclasses

# --- Accelerators -------------------------------------------------------------------

K80, P4, P100, T4, V100, A100 = (
    "NVIDIA_TESLA_K80", "NVIDIA_TESLA_P4", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100", "NVIDIA_TESLA_A100")
#: BEYOND THE GPU GUIDE (read 2026-11 from `google.cloud.aiplatform_v1.AcceleratorType` and
#: Compute Engine's GPU and accelerator-optimized machine pages): today's Vertex AI
#: accelerator types of the fixed-count machine families. A test checks every name
#: against the enum.
A100_80GB, H100_80GB, L4 = "NVIDIA_A100_80GB", "NVIDIA_H100_80GB", "NVIDIA_L4"
H100_MEGA, H200, B200, GB200 = ("NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200",
                                "NVIDIA_GB200")

#: The GPU types the GPU guide list for acceleratorConfig.
SEED_ACCELERATORS = (A100, K80, P4, P100, T4, V100)
ACCELERATOR_TYPES = SEED_ACCELERATORS + (A100_80GB, H100_80GB, L4, H100_MEGA, H200, B200,
                                         GB200)

#: Counts a GPU type can be attached in at all (the GPU guide's table columns; 3 is in none).
GPU_COUNTS = {K80: (1, 2, 4, 8), P4: (1, 2, 4), P100: (1, 2, 4), T4: (1, 2, 4),
              V100: (1, 2, 4, 8)}


@dataclasses.dataclass(frozen=True)
class GpuBacking:
    """How many vCPUs and GB of memory one attached GPU can back, and group caps.

    Attributes:
        vcpus: vCPUs one GPU backs.
        memory_gb: GB of memory one GPU backs.
        caps: count -> (max vCPUs, max GB) for configurations capped below n x per-GPU.
    """

    vcpus: float
    memory_gb: float
    caps: dict[int, tuple[float, float]] = dataclasses.field(default_factory=dict)

    def limits(self, count: int) -> tuple[float, float]:
        """(max vCPUs, max GB) that `count` GPUs of this type back."""
        vcpus, memory = self.vcpus * count, self.memory_gb * count
        cap_vcpus, cap_memory = self.caps.get(count, (vcpus, memory))
        return min(vcpus, cap_vcpus), min(memory, cap_memory)


#: Per-GPU backing of N1 machines. The GPU guide give V100's (12 vCPUs) and the caps (8 x K80
#: at most 208 GB; 4 x P100 at most 64 vCPUs and 208 GB). BEYOND THE GPU GUIDE: the other
#: per-GPU figures are Compute Engine's published N1 limits; for V100 memory the GPU guide say
#: 76 GB but Compute Engine's 78 GB is what the GPU guide's own n1-highmem-96 row (8 x V100,
#: 624 GB) needs, so 78 is used.
GPU_BACKING = {
    K80: GpuBacking(8, 52, {8: (64, 208)}),
    P4: GpuBacking(24, 156),
    P100: GpuBacking(16, 104, {4: (64, 208)}),
    T4: GpuBacking(24, 156),
    V100: GpuBacking(12, 78),
}

# --- Machine types ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Machine:
    """A Compute Engine machine type: its size and, for fixed-GPU families, its GPUs."""

    vcpus: int
    memory_gb: float
    fixed_gpu: tuple[str, int] | None = None
    beyond_guide: bool = False
    arm: bool = False  # an Arm (aarch64) CPU: the x86 trainer image cannot run on it


def _n1(kind: str, vcpus: int) -> tuple[str, Machine]:
    per_vcpu = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}[kind]
    return f"n1-{kind}-{vcpus}", Machine(vcpus, round(vcpus * per_vcpu, 2))


#: The seed table's rows: the machine types that take GPUs, with their sizes.
N1_MACHINES = dict([
    *(_n1("standard", n) for n in (4, 8, 16, 32, 64, 96)),
    *(_n1("highmem", n) for n in (2, 4, 8, 16, 32, 64, 96)),
    *(_n1("highcpu", n) for n in (16, 32, 64, 96)),
])

#: A2 machines come with their A100s (the GPU guide's table rows).
A2_MACHINES = {
    "a2-highgpu-1g": Machine(12, 85, (A100, 1)),
    "a2-highgpu-2g": Machine(24, 170, (A100, 2)),
    "a2-highgpu-4g": Machine(48, 340, (A100, 4)),
    "a2-highgpu-8g": Machine(96, 680, (A100, 8)),
    "a2-megagpu-16g": Machine(96, 1360, (A100, 16)),
}

#: BEYOND THE GPU GUIDE: today's Vertex AI machine families with a fixed number of GPUs
#: (Compute Engine's GPU machine types page).
MODERN_MACHINES = {
    **{f"a2-ultragpu-{n}g": Machine(12 * n, 170 * n, (A100_80GB, n), True) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": Machine(26 * n, 234 * n, (H100_80GB, n), True) for n in (1, 2, 4, 8)},
    **{f"g2-standard-{v}": Machine(v, 4 * v, (L4, n), True)
       for v, n in ((4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8))},
    "a3-megagpu-8g": Machine(208, 1872, (H100_MEGA, 8), True),
    "a3-ultragpu-8g": Machine(224, 2952, (H200, 8), True),
    "a4-highgpu-8g": Machine(224, 3968, (B200, 8), True),
    # GB200 superchips pair the GPUs with Arm (Grace) CPUs.
    "a4x-highgpu-4g": Machine(140, 884, (GB200, 4), True, arm=True),
}

#: BEYOND THE GPU GUIDE (Compute Engine's general-purpose machine pages): GB of memory per
#: vCPU of the predefined shapes of families without GPUs that the pipeline's own steps
#: run on (Vertex AI Pipelines runs a step on an e2-standard-4 unless told otherwise).
PREDEFINED_GB_PER_VCPU = {"e2-standard": 4, "e2-highmem": 8, "e2-highcpu": 1,
                          "n2-standard": 4, "n2-highmem": 8, "n2-highcpu": 1}


def machine_shape(machine: str) -> Machine | None:
    """A machine type's vCPUs and GB of memory (None for a type this catalog cannot size):
    the tables above, else the predefined N1, E2 and N2 shapes, whose memory grows with
    their vCPUs."""
    known = N1_MACHINES.get(machine) or A2_MACHINES.get(machine) or MODERN_MACHINES.get(machine)
    if known:
        return known
    family, _, size = machine.rpartition("-")
    if not size.isdigit():
        return None
    if family in ("n1-standard", "n1-highmem", "n1-highcpu"):
        return _n1(family.split("-")[1], int(size))[1]
    if family in PREDEFINED_GB_PER_VCPU:
        return Machine(int(size), float(int(size) * PREDEFINED_GB_PER_VCPU[family]))
    return None


#: The platform of the trainer image (its lock file is resolved for x86_64 wheels:
#: `components.images.LOCK_PLATFORM`).
TRAINER_PLATFORM = "linux/amd64"

#: BEYOND THE GPU GUIDE (Vertex AI docs: "Schedule training jobs based on resource
#: availability", Dynamic Workload Scheduler, read 2026-11): the GPU types FLEX_START
#: scheduling serves.
FLEX_START_ACCELERATORS = (L4, A100, A100_80GB, H100_80GB, H100_MEGA, H200, B200)
#: FLEX_START jobs run for at most 7 days.
FLEX_START_MAX_SECONDS = 7 * 24 * 3600

#: The GPU guide' compatibility table, as printed: valid counts per machine type and GPU.
#: The printed text lost its empty cells, so each row below was re-aligned to the columns
#: the rules allow (A100 only on A2; caps above); tests rebuild it from GPU_BACKING and
#: N1_MACHINES and check every cell.
_SMALL = {K80: (1, 2, 4, 8), P4: (1, 2, 4), P100: (1, 2, 4), T4: (1, 2, 4), V100: (1, 2, 4, 8)}
_16 = {K80: (2, 4, 8), P4: (1, 2, 4), P100: (1, 2, 4), T4: (1, 2, 4), V100: (2, 4, 8)}
_32 = {K80: (4, 8), P4: (2, 4), P100: (2, 4), T4: (2, 4), V100: (4, 8)}
_BIG = {P4: (4,), T4: (4,), V100: (8,)}
SEED_TABLE: dict[str, dict[str, tuple[int, ...]]] = {
    "n1-standard-4": _SMALL, "n1-standard-8": _SMALL, "n1-standard-16": _16,
    "n1-standard-32": _32, "n1-standard-64": _BIG, "n1-standard-96": _BIG,
    "n1-highmem-2": _SMALL, "n1-highmem-4": _SMALL, "n1-highmem-8": _SMALL,
    "n1-highmem-16": _16, "n1-highmem-32": _32, "n1-highmem-64": _BIG, "n1-highmem-96": _BIG,
    "n1-highcpu-16": _16, "n1-highcpu-32": _32,
    "n1-highcpu-64": {K80: (8,), P4: (4,), P100: (4,), T4: (4,), V100: (8,)},
    "n1-highcpu-96": _BIG,
    "a2-highgpu-1g": {A100: (1,)}, "a2-highgpu-2g": {A100: (2,)}, "a2-highgpu-4g": {A100: (4,)},
    "a2-highgpu-8g": {A100: (8,)}, "a2-megagpu-16g": {A100: (16,)},
}

# --- Legacy AI Platform machine types ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class LegacyMachine:
    """A legacy AI Platform Training machine type and its Compute Engine equivalent."""

    equivalent: str
    gpu: tuple[str, int] | None = None


#: GPUs per legacy type are the GPU guide's. BEYOND THE GPU GUIDE: the Compute Engine equivalents
#: are those of AI Platform Training's machine types page; Vertex AI accepts only them.
LEGACY_MACHINES = {
    "standard": LegacyMachine("n1-standard-4"),
    "large_model": LegacyMachine("n1-highmem-8"),
    "complex_model_s": LegacyMachine("n1-highcpu-8"),
    "complex_model_m": LegacyMachine("n1-highcpu-16"),
    "complex_model_l": LegacyMachine("n1-highcpu-32"),
    "standard_gpu": LegacyMachine("n1-standard-8", (K80, 1)),
    "complex_model_m_gpu": LegacyMachine("n1-standard-16", (K80, 4)),
    "complex_model_l_gpu": LegacyMachine("n1-standard-32", (K80, 8)),
    "standard_p100": LegacyMachine("n1-standard-8", (P100, 1)),
    "complex_model_m_p100": LegacyMachine("n1-standard-16", (P100, 4)),
    "standard_v100": LegacyMachine("n1-standard-8", (V100, 1)),
    "large_model_v100": LegacyMachine("n1-highmem-8", (V100, 1)),
    "complex_model_m_v100": LegacyMachine("n1-standard-16", (V100, 4)),
    "complex_model_l_v100": LegacyMachine("n1-standard-32", (V100, 8)),
}

#: Scale tiers with a fixed cluster: BASIC is one `standard` machine, BASIC_GPU (the GPU guide)
#: one worker with one K80. STANDARD_1, PREMIUM_1 and BASIC_TPU have no Vertex form.
SCALE_TIERS = {"BASIC": "standard", "BASIC_GPU": "standard_gpu"}
UNCONVERTIBLE_TIERS = ("STANDARD_1", "PREMIUM_1", "BASIC_TPU")

# --- Regions and zones ---------------------------------------------------------------

#: Regions offering GPUs for training (the GPU guide's list).
GPU_REGIONS = (
    "us-west1", "us-west2", "us-central1", "us-east1", "us-east4", "northamerica-northeast1",
    "southamerica-east1", "europe-west1", "europe-west2", "europe-west4", "asia-south1",
    "asia-southeast1", "asia-east1", "asia-northeast1", "asia-northeast3",
    "australia-southeast1",
)

#: The K80's zones, from the last snapshot that lists K80 (2022, US regions: Compute
#: Engine accelerator availability per zone as `gcloud compute accelerator-types list`
#: gives it, in skypilot-org/skypilot-catalog catalogs/v2/gcp.csv, commit d72d6709, read
#: 2026-11-21); every other type's zones are read as data by `accelerator_zones`.
K80_ZONES: dict[str, tuple[str, ...]] = {
    "us-central1": ("us-central1-a", "us-central1-c"),
    "us-east1": ("us-east1-c", "us-east1-d"),
    "us-west1": ("us-west1-b",),
}

#: BEYOND THE GPU GUIDE: K80 reached end of support on Compute Engine on 2024-05-01
#: (https://cloud.google.com/compute/docs/eol/k80-eol); Vertex AI marks it deprecated.
END_OF_SUPPORT = {K80: "reached end of support on 2024-05-01 "
                       "(https://cloud.google.com/compute/docs/eol/k80-eol)"}

# --- What the trainer image's CUDA libraries serve ------------------------------------


@dataclasses.dataclass(frozen=True)
class ArchitectureNeeds:
    """The CUDA libraries an NVIDIA architecture needs (`trainer.cluster.accelerators` says which
    architecture each GPU type is).

    Attributes:
        cublas: The first cuBLAS (CUDA toolkit) release with its kernels, as `major.minor`.
        cudnn: The first cuDNN release that supports it.
        last_cuda_major: The last CUDA major that supports it (None: still supported).
        source: Where the figures come from.
    """

    cublas: str
    cudnn: str
    last_cuda_major: int | None = None
    source: str = ""


#: BEYOND THE GPU GUIDE: NVIDIA's CUDA Toolkit and cuDNN release notes (the first release
#: naming each architecture) and the cuDNN support matrix, read 2026-11. `make image-check`
#: and the tests hold the GPU lock's cuBLAS and cuDNN against this table for every GPU type
#: the validator accepts.
ARCHITECTURE_NEEDS = {
    "Kepler": ArchitectureNeeds("5.0", "1.0", last_cuda_major=11, source=(
        "CUDA 12.0 release notes: Kepler (compute capability 3.x) is no longer supported; "
        "cuDNN 9 likewise")),
    "Pascal": ArchitectureNeeds("8.0", "5.1", source="CUDA 8.0 and cuDNN 5.1 release notes"),
    "Volta": ArchitectureNeeds("9.0", "7.0", source="CUDA 9.0 and cuDNN 7.0 release notes"),
    "Turing": ArchitectureNeeds("10.0", "7.3", source="CUDA 10.0 and cuDNN 7.3 release notes"),
    "Ampere": ArchitectureNeeds("11.0", "8.0", source="CUDA 11.0 and cuDNN 8.0 release notes"),
    "Ada Lovelace": ArchitectureNeeds("11.8", "8.6",
                                      source="CUDA 11.8 and cuDNN 8.6 release notes"),
    "Hopper": ArchitectureNeeds("11.8", "8.6", source="CUDA 11.8 and cuDNN 8.6 release notes"),
    "Blackwell": ArchitectureNeeds("12.8", "9.7", source=(
        "CUDA 12.8 release notes (sm_100, sm_120; cuBLAS 12.8) and cuDNN 9.7 release notes")),
}

# --- Network bandwidth (Reduction Server sizing) -------------------------------------

#: BEYOND THE GPU GUIDE (Compute Engine: "Network bandwidths and GPUs", read 2026-11):
#: the maximum egress of N1 machines with T4 or V100 GPUs by GPU count (the page's
#: configurations with the most vCPUs; fewer vCPUs may get less). N1 machines with P100,
#: P4 or K80 GPUs get what N1 machines without GPUs get.
N1_GPU_EGRESS_GBPS = {T4: {1: 32, 2: 50, 4: 100}, V100: {1: 24, 2: 32, 4: 50, 8: 100}}
#: The same page, per accelerator-optimized machine type (A2 by GPU count; G2 by machine;
#: A3 and A4 eight-GPU machines through their GPU NICs).
FIXED_EGRESS_GBPS = {
    **{f"a2-highgpu-{n}g": gbps for n, gbps in ((1, 24), (2, 32), (4, 50), (8, 100))},
    "a2-megagpu-16g": 100,
    **{f"a2-ultragpu-{n}g": gbps for n, gbps in ((1, 24), (2, 32), (4, 50), (8, 100))},
    **{f"g2-standard-{v}": gbps for v, gbps in ((4, 10), (8, 16), (12, 16), (16, 32),
                                                 (24, 32), (32, 32), (48, 50), (96, 100))},
    **{f"a3-highgpu-{n}g": gbps for n, gbps in ((1, 25), (2, 50), (4, 100), (8, 1000))},
    "a3-megagpu-8g": 1800, "a3-ultragpu-8g": 3600, "a4-highgpu-8g": 3600,
}
#: General-purpose machines (Compute Engine: "Network bandwidth", per-VM maximum egress
#: without Tier_1 networking): 2 Gbps per vCPU, at most 32 Gbps (E2: 16). Vertex AI's
#: Reduction Server docs recommend n1-highcpu-16 reducers for their 32 Gbps.
GENERAL_PURPOSE_GBPS_PER_VCPU = 2
GENERAL_PURPOSE_MAX_GBPS = {"n1": 32, "n2": 32, "n2d": 32, "c2": 32, "c2d": 32, "e2": 16}
