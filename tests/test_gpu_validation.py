"""GPU rules: the valid-count table, worker pool rules, regions and messages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from components import gpu_validation as gv


def pools(*specs):
    return [{"machine_spec": dict(zip(("machine_type", "accelerator_type", "accelerator_count"),
                                      spec)), "replica_count": 1} for spec in specs]


@pytest.mark.parametrize("machine,gpu,count", [
    ("n1-standard-4", "NVIDIA_TESLA_K80", 8),
    ("n1-standard-16", "NVIDIA_TESLA_P4", 1),
    ("n1-standard-32", "NVIDIA_TESLA_V100", 4),
    ("n1-standard-64", "NVIDIA_TESLA_T4", 4),
    ("n1-highcpu-64", "NVIDIA_TESLA_K80", 8),
    ("n1-highcpu-64", "NVIDIA_TESLA_P100", 4),
    ("n1-highmem-2", "NVIDIA_TESLA_V100", 1),
    ("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8),
    ("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16),
])
def test_valid_cells(machine, gpu, count):
    result = gv.validate_worker_pool_specs(pools((machine, gpu, count)), region="us-central1")
    assert result.ok, result.errors


@pytest.mark.parametrize("machine,gpu,count,hint", [
    ("n1-standard-4", "NVIDIA_TESLA_T4", 3, "takes 1, 2, 4"),  # 3 is in no column
    ("n1-standard-32", "NVIDIA_TESLA_V100", 2, "takes 4, 8"),  # the documents' example
    ("n1-standard-64", "NVIDIA_TESLA_K80", 8, "cannot be attached"),  # 208 GB cap
    ("n1-standard-96", "NVIDIA_TESLA_P100", 4, "cannot be attached"),  # 64 vCPU cap
    ("n1-standard-8", "NVIDIA_TESLA_A100", 1, "cannot be attached"),  # A100 on A2 only
    ("a2-highgpu-2g", "NVIDIA_TESLA_A100", 1, "takes 2"),
    ("n1-standard-2", "NVIDIA_TESLA_T4", 1, "takes no GPUs"),
])
def test_invalid_cells_say_what_is_valid(machine, gpu, count, hint):
    result = gv.validate_worker_pool_specs(pools((machine, gpu, count)))
    assert not result.ok
    assert len(result.errors) == 1
    assert "worker_pool_specs[0] (chief)" in result.errors[0]
    assert hint in result.errors[0]


def test_table_counts_are_within_each_gpus_maximum():
    maximum = {"NVIDIA_TESLA_K80": 8, "NVIDIA_TESLA_P4": 4, "NVIDIA_TESLA_P100": 4,
               "NVIDIA_TESLA_T4": 4, "NVIDIA_TESLA_V100": 8, "NVIDIA_TESLA_A100": 16}
    for machine, row in gv.VALID_GPU_COUNTS.items():
        for gpu, counts in row.items():
            assert counts and max(counts) <= maximum[gpu], (machine, gpu)
            assert list(counts) == sorted(counts)


def test_pool_rules_report_every_problem_at_once():
    specs = [
        {"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 2},
        {},
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_count": 2}},
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_H100",
                          "accelerator_count": 1}},
    ]
    result = gv.validate_worker_pool_specs(specs)
    joined = "\n".join(result.errors)
    assert not result.ok and len(result.errors) == 3, joined
    assert "chief pool must have exactly 1 replica" in joined
    assert "worker_pool_specs[2] (parameter server): machine_spec.accelerator_count is 2 but " \
           "accelerator_type is not set" in joined
    assert "'NVIDIA_H100'; valid types are NVIDIA_TESLA_A100" in joined
    assert result.specs[1] == {}  # An unused pool between used ones stays an empty entry.


def test_missing_chief_and_too_many_pools():
    assert "chief pool is required" in gv.validate_worker_pool_specs([{}]).errors[0]
    five = pools(*[("n1-standard-8",)] * 5)
    assert "takes 1 to 4" in gv.validate_worker_pool_specs(five).errors[0]


def test_region_without_gpus():
    result = gv.validate_worker_pool_specs(pools(("n1-standard-8", "NVIDIA_TESLA_T4", 1)),
                                           region="europe-north1")
    assert not result.ok and "offers no GPUs" in result.errors[0]
    assert "us-central1" in result.errors[0]
    # A CPU-only job needs no GPU region.
    assert gv.validate_worker_pool_specs(pools(("n1-standard-8",)), region="europe-north1").ok


def test_numbers_from_protobuf_struct_are_normalised():
    # KFP hands list parameters over as protobuf Struct, where every number is a double.
    result = gv.validate_worker_pool_specs([{"machine_spec": {
        "machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1.0}, "replica_count": 1.0}])
    assert result.ok, result.errors
    assert result.specs[0]["replica_count"] == 1
    assert isinstance(result.specs[0]["machine_spec"]["accelerator_count"], int)
    bad = gv.validate_worker_pool_specs(pools(("n1-standard-8", "NVIDIA_TESLA_T4", 1.5)))
    assert bad.errors == ["worker_pool_specs[0] (chief): machine_spec.accelerator_count is 1.5; "
                          "expected a whole number of GPUs"]


def test_raise_for_errors():
    with pytest.raises(gv.GpuConfigError, match="takes 1, 2, 4"):
        gv.validate_worker_pool_specs(pools(("n1-standard-4", "NVIDIA_TESLA_T4", 3))) \
            .raise_for_errors()


def test_module_does_not_import_tensorflow():
    code = "import sys, components.gpu_validation; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
