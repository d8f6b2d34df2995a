"""GPU rules: every cell of the table, legacy types, config.yaml, regions, zones, job names."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
import yaml

from components.gpu import ai_platform_pools as ai
from components.gpu import catalog as cat
from components.gpu import validation as gv
from components.training import job_names as jn
from tests.support.facts import listed_after, missing
from tests.support.seed_configs import SEED_CONFIG_COMPUTE_ENGINE, SEED_CONFIG_LEGACY

SEED_GPUS = cat.SEED_ACCELERATORS

IMAGE = "cannot run the trainer image"


def rule_errors(result):
    """The errors of the GPU guide's rules, without the trainer image's refusal of K80s
    (CUDA 12 has no Kepler), which the guide's tables predate."""
    return [e for e in result.errors if IMAGE not in e]


def pools(*specs, replicas=None):
    out = []
    for i, spec in enumerate(specs):
        keys = ("machine_type", "accelerator_type", "accelerator_count")
        machine_spec = dict(zip(keys, spec, strict=False))
        out.append({"machine_spec": machine_spec,
                    "replica_count": (replicas or [1] * len(specs))[i]})
    return out


# --- The table ------------------------------------------------------------------------


@pytest.mark.parametrize("machine", sorted(cat.SEED_TABLE))
def test_every_cell_of_the_table(machine):
    """Every GPU type x every count from 1 to 16 on every machine type of the table."""
    row = cat.SEED_TABLE[machine]
    for gpu in SEED_GPUS:
        for count in range(1, 17):
            result = gv.validate_worker_pool_specs(pools((machine, gpu, count)))
            expected = count in row.get(gpu, ())
            assert (not rule_errors(result)) is expected, (machine, gpu, count, result.errors)
            assert result.ok is (expected and gpu != cat.K80)
            assert len(result.errors) == (not expected) + (gpu == cat.K80)
            assert all(e.startswith("worker_pool_specs[0] (chief): ") for e in result.errors)


@pytest.mark.parametrize("machine", sorted(cat.SEED_TABLE))
def test_table_rows_follow_from_the_documents_rules(machine):
    # The printed table lost its empty cells; every row must follow from the rules.
    assert gv.derive_valid_counts(machine) == cat.SEED_TABLE[machine]


def test_rows_as_printed_in_the_documents():
    # The text of the table, cells in column order with the empty ones dropped.
    printed = {
        "n1-standard-4": "1,2,4,8 1,2,4 1,2,4 1,2,4 1,2,4,8",
        "n1-standard-16": "2,4,8 1,2,4 1,2,4 1,2,4 2,4,8",
        "n1-standard-32": "4,8 2,4 2,4 2,4 4,8", "n1-standard-64": "4 4 8",
        "n1-highmem-96": "4 4 8",
        "n1-highcpu-64": "8 4 4 4 8", "a2-megagpu-16g": "16",
    }
    columns = (cat.A100, cat.K80, cat.P4, cat.P100, cat.T4, cat.V100)
    for machine, text in printed.items():
        row = cat.SEED_TABLE[machine]
        cells = [",".join(map(str, row[gpu])) for gpu in columns if gpu in row]
        assert " ".join(cells) == text, machine


def test_documents_example_v100_on_n1_standard_32():
    # "each V100 backs up to 12 vCPUs ... an n1-standard-32 worker needs at least 4"
    two = gv.validate_worker_pool_specs(pools(("n1-standard-32", cat.V100, 2)))
    # The limits of 2 V100s (12 vCPUs and 78 GB each) against the machine's shape.
    assert not missing(two.errors[0], "n1-standard-32", "24 vCPUs", "156 GB", "32 vCPUs",
                       "120 GB")
    assert "n1-standard-32 takes 4, 8 x NVIDIA_TESLA_V100" in two.errors[0]
    three = gv.validate_worker_pool_specs(pools(("n1-standard-32", cat.V100, 3)))
    assert "attaches in counts of 1, 2, 4, 8 only" in three.errors[0]
    assert "machine types taking 3: none" in three.errors[0]
    assert gv.validate_worker_pool_specs(pools(("n1-standard-32", cat.V100, 4))).ok


def test_documents_caps_k80_and_p100():
    k80 = gv.validate_worker_pool_specs(pools(("n1-standard-64", cat.K80, 8))).errors[0]
    assert not missing(k80, "n1-standard-64", "8 x NVIDIA_TESLA_K80", "64 vCPUs", "208 GB",
                       "240 GB")
    p100 = gv.validate_worker_pool_specs(pools(("n1-standard-96", cat.P100, 4))).errors[0]
    assert not missing(p100, "4 x NVIDIA_TESLA_P100", "64 vCPUs", "208 GB", "96 vCPUs")
    assert not rule_errors(gv.validate_worker_pool_specs(pools(("n1-highcpu-64", cat.K80, 8))))
    assert gv.validate_worker_pool_specs(pools(("n1-highcpu-64", cat.P100, 4))).ok


def test_invalid_messages_say_what_is_valid():
    t4 = gv.validate_worker_pool_specs(pools(("n1-standard-4", cat.T4, 8))).errors[0]
    assert t4.startswith("worker_pool_specs[0] (chief): machine_spec.accelerator_count is 8; "
                         "n1-standard-4 takes 1, 2, 4 x NVIDIA_TESLA_T4")
    a100 = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.A100, 1))).errors[0]
    assert "A100 GPUs come only with A2 machine types" in a100
    none = gv.validate_worker_pool_specs(pools(("n1-standard-2", cat.T4, 1))).errors[0]
    assert "'n1-standard-2', which takes no GPUs; machine types taking 1 x NVIDIA_TESLA_T4: " \
           "n1-standard-4" in none
    a2 = gv.validate_worker_pool_specs(pools(("a2-highgpu-2g",))).errors[0]
    assert "comes with 2 x NVIDIA_TESLA_A100; set accelerator_type" in a2


def test_gcloud_spelling_of_gpu_types_is_read_with_a_warning():
    """The documents' gcloud flags write `type=nvidia-tesla-t4`; the API takes NVIDIA_TESLA_T4."""
    result = gv.validate_worker_pool_specs(pools(("n1-highcpu-16", "nvidia-tesla-t4", 4)))
    assert result.ok and result.specs[0]["machine_spec"]["accelerator_type"] == cat.T4
    assert "'nvidia-tesla-t4' read as NVIDIA_TESLA_T4" in result.warnings[0]
    typo = gv.validate_worker_pool_specs(pools(("n1-highcpu-16", "nvidia-tesla-t5", 4)))
    assert "accelerator_type is 'nvidia-tesla-t5'; valid types are NVIDIA_TESLA_A100" \
        in typo.errors[0]


# --- Beyond the GPU guide ----------------------------------------------------------------


@pytest.mark.parametrize("machine,gpu,count", [
    ("a2-ultragpu-1g", cat.A100_80GB, 1), ("a2-ultragpu-8g", cat.A100_80GB, 8),
    ("a3-highgpu-8g", cat.H100_80GB, 8), ("g2-standard-4", cat.L4, 1),
    ("g2-standard-24", cat.L4, 2), ("g2-standard-96", cat.L4, 8),
])
def test_fixed_gpu_families(machine, gpu, count):
    assert gv.validate_worker_pool_specs(pools((machine, gpu, count))).ok
    wrong = gv.validate_worker_pool_specs(pools((machine, gpu, count * 2)))
    assert f"{machine} takes {count} x {gpu}" in wrong.errors[0]
    assert cat.MODERN_MACHINES[machine].beyond_guide


def test_k80_is_refused_as_no_cuda_12_build_runs_on_kepler():
    result = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.K80, 1)))
    (error,) = result.errors
    assert not result.ok and not missing(
        error, "worker_pool_specs[0] (chief)", "machine_spec.accelerator_type",
        "NVIDIA_TESLA_K80", "compute capability 3.7", "CUDA 12", "2024-05-01",
        "NVIDIA_TESLA_T4")


# --- Legacy machine types and config.yaml -----------------------------------------------


@pytest.mark.parametrize("legacy", sorted(cat.LEGACY_MACHINES))
def test_every_legacy_machine_type(legacy):
    info = cat.LEGACY_MACHINES[legacy]
    specs = ai.from_ai_platform_config({"scaleTier": "CUSTOM", "masterType": legacy})
    spec = specs[0]["machine_spec"]
    assert spec["machine_type"] == info.equivalent
    assert (spec.get("accelerator_type"), spec.get("accelerator_count")) == \
        (info.gpu if info.gpu else (None, None))
    result = gv.validate_worker_pool_specs(specs, region="us-central1")
    assert not rule_errors(result), result.errors  # every equivalent is a valid table cell
    assert result.ok is (not info.gpu or info.gpu[0] != cat.K80)
    # Vertex AI itself does not take legacy names.
    direct = gv.validate_worker_pool_specs([{"machine_spec": {"machine_type": legacy}}])
    assert not missing(direct.errors[0], legacy, "legacy", info.equivalent)


def test_documents_legacy_gpu_contents():
    # What the documents say each legacy GPU type carries.
    carried = {"standard_gpu": (cat.K80, 1), "complex_model_m_gpu": (cat.K80, 4),
               "complex_model_l_gpu": (cat.K80, 8), "standard_p100": (cat.P100, 1),
               "complex_model_m_p100": (cat.P100, 4), "standard_v100": (cat.V100, 1),
               "large_model_v100": (cat.V100, 1), "complex_model_m_v100": (cat.V100, 4),
               "complex_model_l_v100": (cat.V100, 8)}
    assert {k: v.gpu for k, v in cat.LEGACY_MACHINES.items() if v.gpu} == carried


def test_documents_config_example_with_compute_engine_machines():
    config = yaml.safe_load(SEED_CONFIG_COMPUTE_ENGINE)
    specs = ai.from_ai_platform_config(config)
    assert specs == [
        {"machine_spec": {"machine_type": "n1-highcpu-16", "accelerator_type": cat.T4,
                          "accelerator_count": 4}, "replica_count": 1},
        {"machine_spec": {"machine_type": "n1-highcpu-16", "accelerator_type": cat.T4,
                          "accelerator_count": 4}, "replica_count": 9},
        {"machine_spec": {"machine_type": "n1-highmem-8"}, "replica_count": 3},
    ]
    result = ai.validate_ai_platform_config(config, region="us-central1")
    assert result.ok and not result.warnings, result


def test_documents_config_example_with_legacy_machines():
    result = ai.validate_ai_platform_config(yaml.safe_load(SEED_CONFIG_LEGACY), "us-central1")
    # Converted and valid by the guide's rules; refused only for the K80s its legacy types
    # carry (no CUDA 12), said of the types, with the same machines on T4s to paste.
    master, worker = result.errors
    assert not missing(master, "trainingInput.masterType", "complex_model_m_gpu",
                       "4 x NVIDIA_TESLA_K80", "Kepler")
    head, block = worker.split(":\n", 1)
    assert not missing(head, "trainingInput.workerType", "complex_model_m_gpu",
                       "4 x NVIDIA_TESLA_K80")
    pasted = yaml.safe_load(block)
    assert pasted == {"trainingInput": {
        "scaleTier": "CUSTOM", "masterType": "n1-standard-16", "workerCount": 9,
        "workerType": "n1-standard-16", "parameterServerCount": 3,
        "parameterServerType": "large_model",
        "masterConfig": {"acceleratorConfig": {"count": 4, "type": cat.T4}},
        "workerConfig": {"acceleratorConfig": {"count": 4, "type": cat.T4}}}}
    assert ai.validate_ai_platform_config(pasted, "us-central1").ok
    assert [p["machine_spec"] for p in result.specs] == [
        {"machine_type": "n1-standard-16", "accelerator_type": cat.K80, "accelerator_count": 4},
        {"machine_type": "n1-standard-16", "accelerator_type": cat.K80, "accelerator_count": 4},
        {"machine_type": "n1-highmem-8"}]
    assert [p["replica_count"] for p in result.specs] == [1, 9, 3]


def test_older_document_variant_with_k80_accelerators():
    # Document 001 (older) has the first example with 4 x K80 on n1-highcpu-16.
    config = yaml.safe_load(SEED_CONFIG_COMPUTE_ENGINE.replace("NVIDIA_TESLA_T4", cat.K80))
    result = ai.validate_ai_platform_config(config, "us-central1")
    assert not rule_errors(result) and len(result.errors) == 2


def test_scale_tiers():
    basic_gpu = ai.from_ai_platform_config({"scaleTier": "BASIC_GPU"})
    assert basic_gpu == [{"machine_spec": {"machine_type": "n1-standard-8",
                                           "accelerator_type": cat.K80, "accelerator_count": 1},
                          "replica_count": 1}]
    assert ai.from_ai_platform_config({"trainingInput": {}})[0]["machine_spec"] == \
        {"machine_type": "n1-standard-4"}  # BASIC is the default tier
    with pytest.raises(gv.GpuConfigError, match="STANDARD_1, which has no fixed machine types"):
        ai.from_ai_platform_config({"scaleTier": "STANDARD_1"})
    with pytest.raises(gv.GpuConfigError, match="scaleTier is 'HUGE'; valid tiers are BASIC"):
        ai.from_ai_platform_config({"scaleTier": "HUGE"})
    with pytest.raises(gv.GpuConfigError) as refused:
        ai.from_ai_platform_config({"scaleTier": "BASIC_GPU", "masterType": "n1-standard-8"})
    assert not missing(str(refused.value), "BASIC_GPU", "masterType", "CUSTOM")


def test_custom_tier_requirements_all_reported():
    config = {"scaleTier": "custom", "workerCount": 2,
              "parameterServerCount": "x",
              "evaluatorCount": 1, "evaluatorType": "complex_model_m_gpu",
              "evaluatorConfig": {"acceleratorConfig": {"count": 1, "type": "NVIDIA_TESLA_T4"}}}
    with pytest.raises(gv.GpuConfigError) as info:
        ai.from_ai_platform_config(config)
    errors = info.value.errors
    assert len(errors) == 4, errors
    assert "trainingInput.masterType is not set" in errors[0]
    assert "trainingInput.workerType is not set; workerCount is 2" in errors[1]
    assert "trainingInput.parameterServerCount is 'x'" in errors[2]
    assert not missing(errors[3], "evaluatorConfig.acceleratorConfig", "complex_model_m_gpu",
                       "4 x NVIDIA_TESLA_K80")


def test_converted_pools_keep_an_unused_pool_and_name_the_config_fields():
    config = {"scaleTier": "CUSTOM", "masterType": "n1-standard-8",
              "evaluatorCount": 1, "evaluatorType": "n1-standard-4",
              "evaluatorConfig": {"acceleratorConfig": {"count": 3, "type": "nvidia-tesla-t4"}}}
    result = ai.validate_ai_platform_config(config)
    assert [bool(p) for p in result.specs] == [True, False, False, True]
    (error,) = result.errors
    assert not missing(error, "trainingInput.evaluator", "worker_pool_specs[3]",
                       "machine_spec.accelerator_count", "is 3", "n1-standard-4",
                       "1, 2, 4 x NVIDIA_TESLA_T4", "machine types taking 3: none")
    with pytest.raises(gv.GpuConfigError, match="needs both count and type"):
        ai.from_ai_platform_config({"scaleTier": "CUSTOM", "masterType": "n1-standard-8",
                                    "masterConfig": {"acceleratorConfig": {"count": 2}}})


# --- Vertex worker pool rules ------------------------------------------------------------


def test_pool_rules_report_every_problem_at_once():
    specs = [
        {"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 2},
        {},
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_count": 2}},
        {"machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_H200",
                          "accelerator_count": 1}},
    ]
    result = gv.validate_worker_pool_specs(specs)
    joined = "\n".join(result.errors)
    assert not result.ok and len(result.errors) == 3, joined
    assert "chief pool must have exactly 1 replica" in joined
    assert "worker_pool_specs[2] (parameter server): machine_spec.accelerator_count is 2 but " \
           "accelerator_type is not set" in joined
    assert "'NVIDIA_H200' (did you mean NVIDIA_H200_141GB?); valid types are " \
           "NVIDIA_TESLA_A100" in joined
    assert result.specs[1] == {}  # An unused pool between used ones stays an empty entry.


def test_missing_chief_too_many_pools_and_bad_machine_names():
    assert "chief pool is required" in gv.validate_worker_pool_specs([{}]).errors[0]
    five = pools(*[("n1-standard-8",)] * 5)
    assert "takes 1 to 4" in gv.validate_worker_pool_specs(five).errors[0]
    assert "expected a Compute Engine machine type" in \
        gv.validate_worker_pool_specs(pools(("N1 Standard",))).errors[0]
    assert gv.validate_worker_pool_specs(pools(("e2-standard-8",))).ok  # CPU-only: any type


def test_numbers_from_protobuf_struct_are_normalised():
    # KFP hands list parameters over as protobuf Struct, where every number is a double.
    result = gv.validate_worker_pool_specs([{"machine_spec": {
        "machine_type": "n1-standard-8", "accelerator_type": cat.T4,
        "accelerator_count": 1.0}, "replica_count": 1.0}])
    assert result.ok, result.errors
    assert result.specs[0]["replica_count"] == 1
    assert isinstance(result.specs[0]["machine_spec"]["accelerator_count"], int)
    bad = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.T4, 1.5)))
    assert bad.errors == ["worker_pool_specs[0] (chief): machine_spec.accelerator_count is 1.5; "
                          "expected a whole number of GPUs"]


def test_raise_for_errors():
    with pytest.raises(gv.GpuConfigError, match="takes 1, 2, 4"):
        gv.validate_worker_pool_specs(pools(("n1-standard-4", cat.T4, 3))).raise_for_errors()


# --- Regions and zones --------------------------------------------------------------------


def test_region_without_gpus():
    # Johannesburg: no zone of it offers a GPU type in the zone data.
    result = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.T4, 1)),
                                           region="africa-south1")
    assert not result.ok and "offers no GPUs" in result.errors[0]
    assert "us-central1" in result.errors[0]
    # A CPU-only job needs no GPU region.
    assert gv.validate_worker_pool_specs(pools(("n1-standard-8",)), region="africa-south1").ok
    # A region with other GPUs (europe-north1: H100s) names where T4s are instead.
    result = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.T4, 1)),
                                           region="europe-north1")
    assert "NVIDIA_TESLA_T4 is not offered in region europe-north1; regions offering it: " in \
        result.errors[0]


def test_documents_zone_example_t4_k80_p100_in_us_central1():
    specs = pools(("n1-standard-8", cat.T4, 1), ("n1-standard-8", cat.P100, 1),
                  ("n1-standard-8", cat.K80, 1))
    result = gv.validate_worker_pool_specs(specs, region="us-central1")
    assert not result.ok
    assert any("which no single zone of us-central1 offers together" in e for e in result.errors)
    # Each pair that shares a zone is fine.
    pair = gv.validate_worker_pool_specs(specs[:1] + specs[2:], "us-central1")  # T4+K80 in -a
    assert not rule_errors(pair)
    assert not rule_errors(gv.validate_worker_pool_specs(specs[1:], "us-central1"))  # in -c


def test_gpu_not_offered_in_region():
    result = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.P100, 1)), "us-east4")
    assert not missing(result.errors[0], "NVIDIA_TESLA_P100", "us-east4")
    assert listed_after(result.errors[0], "regions offering it: ") == [
        "asia-east1", "australia-southeast1", "europe-west1", "europe-west4", "us-central1",
        "us-east1", "us-west1"]


def test_every_region_of_the_guides_types_is_known_outside_the_us_too():
    """The 2026 snapshot, read as data: V100 only where Compute Engine offers it (not in
    europe-west2 or asia-south1), T4 refused in europe-west6 (where the L4 is offered) with
    every region that offers it, never "offers no GPUs"."""
    from components.gpu import accelerator_zones

    v100 = "asia-east1, europe-west4, us-central1, us-east1, us-west1"
    for region in ("europe-west2", "asia-south1", "us-west2"):
        result = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.V100, 1)), region)
        assert not missing(result.errors[0], "NVIDIA_TESLA_V100", region), result.errors
        assert ", ".join(listed_after(result.errors[0], "regions offering it: ")) == v100
    result = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.T4, 1)), "europe-west6")
    (error,) = result.errors
    assert "NVIDIA_TESLA_T4 is not offered in region europe-west6; regions offering it: " \
        "asia-east1, asia-east2, " in error and "offers no GPUs" not in error
    assert listed_regions(error) == accelerator_zones.regions_of(cat.T4)
    assert gv.validate_worker_pool_specs(pools(("g2-standard-8", cat.L4, 1)), "europe-west6").ok
    assert gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.V100, 1)),
                                         "europe-west4").ok
    # Outside the GPU guide's list but offered by Compute Engine: a warning, not a refusal.
    result = gv.validate_worker_pool_specs(pools(("n1-standard-8", cat.T4, 1)), "me-west1")
    assert result.ok and "me-west1 is not among the GPU guide's GPU regions" in \
        result.warnings[0]


def listed_regions(error):
    return error.split("regions offering it: ", 1)[1].split(" (", 1)[0].split(", ")


def test_zone_data_is_sourced_and_consistent():
    from components.gpu import accelerator_zones

    assert "2026-11-28" in accelerator_zones.SOURCE and "skypilot-catalog" in \
        accelerator_zones.SOURCE
    data = accelerator_zones.zones()
    assert len(data) > 20  # every region, not the US alone
    for region, zones in data.items():
        for zone, gpus in zones.items():
            assert zone.startswith(region + "-") and gpus <= set(cat.ACCELERATOR_TYPES)
    # The GPU guide's rule: no us-central1 zone offers T4, K80 and P100 together.
    assert not any({cat.T4, cat.K80, cat.P100} <= gpus
                   for gpus in data["us-central1"].values())


def test_unknown_zones_warn_when_mixing_types():
    specs = pools(("n1-standard-8", cat.T4, 1), ("n1-standard-8", cat.V100, 1))
    result = gv.validate_worker_pool_specs(specs, region="europe-west4")
    assert result.ok, result.errors  # both in europe-west4-a, -b, -c
    apart = pools(("n1-standard-8", cat.P100, 1), ("n1-standard-8", cat.P4, 1))
    result = gv.validate_worker_pool_specs(apart, region="europe-west4")
    assert "which no single zone of europe-west4 offers together (europe-west4-a: " in \
        result.errors[0]


# --- Job names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name,problem", [
    ("train_2024_v1", None), ("T", None), ("a" * 128, None),
    ("1st_job", "does not start with a letter"), ("my-job", "contains '-'"),
    ("job name", "contains ' '"), ("a" * 129, "129 characters long; at most 128"),
    ("", "expected letters"), (None, "expected letters"),
])
def test_job_names(name, problem):
    problems = jn.validate_job_name(name)
    if problem is None:
        assert problems == []
    else:
        assert problem in " ".join(problems)


def test_unique_job_names_sort_by_time():
    first = jn.unique_job_name("cassava", dt.datetime(2026, 1, 2, 3, 4, 5))
    second = jn.unique_job_name("cassava", dt.datetime(2026, 1, 2, 3, 4, 6))
    assert first == "cassava_20260102_030405" and first < second
    assert jn.validate_job_name(first) == []
    assert len(first) - len("cassava") == jn.JOB_NAME_SUFFIX
    assert "at most 112 fit" in jn.validate_job_name("a" * 113, reserve=jn.JOB_NAME_SUFFIX)[0]


def test_module_does_not_import_tensorflow():
    code = ("import sys, components.gpu.validation, components.gpu.ai_platform_pools; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("region", ["us-west2", "us-east4"])
def test_an_a100_pool_is_refused_where_the_region_has_no_a100s(region):
    """Tried as a new user would: an A100 pool in us-west2 or us-east4 was accepted; the
    zone snapshot records A100 zones as it does the GPU guide's types."""
    a100 = pools(("a2-highgpu-1g", cat.A100, 1), ("a2-highgpu-1g", cat.A100, 1))
    result = gv.validate_worker_pool_specs(a100, region=region)
    assert not result.ok
    (error,) = result.errors
    assert not missing(error, "worker_pool_specs[0] (chief)", "worker_pool_specs[1] (worker)",
                       "NVIDIA_TESLA_A100", region)
    assert listed_after(error, "regions offering it: ") == [
        "asia-northeast1", "asia-northeast3", "asia-southeast1", "europe-west4", "me-west1",
        "us-central1", "us-east1", "us-west1", "us-west3", "us-west4"]
    assert gv.validate_worker_pool_specs(a100, region="us-central1").ok


def test_a_gpu_type_the_zone_data_does_not_cover_is_a_warning_not_a_refusal():
    gb200 = pools(("a4x-highgpu-4g", cat.GB200, 4))
    result = gv.validate_worker_pool_specs(gb200, region="us-west2")
    assert not any("not offered" in e for e in result.errors)
    assert any(w.startswith("region us-west2: where Vertex AI offers NVIDIA_GB200 is not "
                            "recorded here") for w in result.warnings)


@pytest.mark.parametrize(("machine", "gpu", "count", "offered", "not_offered"), [
    ("g2-standard-8", cat.L4, 1, "europe-west4", "southamerica-east1"),
    ("a3-highgpu-8g", cat.H100_80GB, 8, "us-east5", "us-east1"),
    ("a3-ultragpu-8g", cat.H200, 8, "us-south1", "asia-east1"),
    ("a2-ultragpu-1g", cat.A100_80GB, 1, "us-east5", "us-west1"),
])
def test_accelerator_optimized_gpus_are_refused_where_compute_engine_lacks_them(
        machine, gpu, count, offered, not_offered):
    from components.gpu import optimized_zones

    assert gv.validate_worker_pool_specs(pools((machine, gpu, count)), offered).ok
    refused = gv.validate_worker_pool_specs(pools((machine, gpu, count)), not_offered)
    assert f"{gpu} is not offered in region {not_offered}; regions offering it: " \
           f"{', '.join(optimized_zones.regions_of(gpu))}" in refused.errors[0]
    assert "2026-11-26" in refused.errors[0]


def test_b200_is_held_against_its_zones_beside_the_images_refusal():
    """The trainer image cannot run on Blackwell (its own error); the region rule still
    says where B200 is offered."""
    offered = gv.validate_worker_pool_specs(pools(("a4-highgpu-8g", cat.B200, 8)), "us-east1")
    refused = gv.validate_worker_pool_specs(pools(("a4-highgpu-8g", cat.B200, 8)), "us-west1")
    assert not any("not offered in region" in e for e in offered.errors)
    assert not any("not recorded here" in w for w in offered.warnings)
    (b200,) = [e for e in refused.errors if "NVIDIA_B200" in e and "us-west1" in e]
    assert listed_after(b200, "regions offering it: ") == [
        "asia-northeast1", "asia-southeast1", "europe-north1", "europe-west4", "us-central1",
        "us-east1", "us-east4", "us-south1", "us-west2", "us-west3"]


def test_optimized_zone_snapshot_is_consistent():
    from components.gpu import optimized_zones

    for gpu, regions in optimized_zones.ZONES.items():
        assert gpu in cat.ACCELERATOR_TYPES
        for region, zones in regions.items():
            assert zones and all(z.startswith(region + "-") and len(z) == len(region) + 2
                                 for z in zones)


@pytest.mark.parametrize(("machine", "gpu", "error"), [
    ("n1-standard-8", "NVIDIA_T4", "accelerator_type is 'NVIDIA_T4' (did you mean "
                                   "NVIDIA_TESLA_T4?); valid types are"),
    ("a3-highgpu-1g", "NVIDIA_H100", "accelerator_type is 'NVIDIA_H100' (did you mean "
                                     "NVIDIA_H100_80GB?); valid types are"),
    ("n1-standrd-8", cat.T4, "machine_type is 'n1-standrd-8' (did you mean n1-standard-8?), "
                             "which takes no GPUs"),
])
def test_a_mistyped_name_gets_the_closest_valid_one_and_no_region_warning(machine, gpu,
                                                                           error):
    result = gv.validate_worker_pool_specs(pools((machine, gpu, 1)), "us-central1")
    assert error in result.errors[0] and len(result.errors) == 1
    assert result.warnings == []


@pytest.mark.parametrize("count", ["²", "0\x1f"])
def test_a_replica_count_of_odd_characters_is_an_error_not_a_crash(count):
    # '²'.isdigit() is True, but int('²') raises; '0\x1f' strips to '0', but int() keeps
    # the '\x1f' (both found by the random documents test).
    result = gv.validate_worker_pool_specs([{"machine_spec": None, "replica_count": count}])
    assert not result.ok and any("replica_count" in e for e in result.errors)


def test_every_k80_legacy_type_is_refused_with_the_same_machine_on_a_gpu_that_runs():
    from components.gpu import legacy_gpus

    for legacy, info in cat.LEGACY_MACHINES.items():
        if not info.gpu or info.gpu[0] != cat.K80:
            continue
        given = {"scaleTier": "CUSTOM", "masterType": legacy}
        (error,) = legacy_gpus.refusal(given, "us-central1", ai.convert_ai_platform_config)
        assert not missing(error, "trainingInput.masterType", legacy,
                           f"{info.gpu[1]} x {cat.K80}")
        nearest = legacy_gpus.replacement(given, "us-central1", ai.convert_ai_platform_config)
        assert nearest["masterType"] == info.equivalent
        # T4s where they come in that count, else V100s (8 of them).
        assert nearest["masterConfig"]["acceleratorConfig"] == {
            "count": info.gpu[1], "type": cat.T4 if info.gpu[1] <= 4 else cat.V100}
        assert ai.validate_ai_platform_config(nearest, "us-central1").ok
    # A supported legacy type needs no replacement.
    assert legacy_gpus.refusal({"masterType": "standard_v100", "scaleTier": "CUSTOM"}, None,
                               ai.convert_ai_platform_config) == []


def test_every_training_input_field_is_converted_carried_or_named():
    """Nothing of a `trainingInput` is dropped unsaid: the cluster's fields become pools,
    the job's an option (`CARRIED`) or a warning (`NOT_USED`), `hyperparameters` a study."""
    from components.gpu.ai_platform_job import CARRIED, NOT_USED

    cluster = {k for k in ai.TRAINING_INPUT_KEYS
               if k.startswith(("master", "worker", "parameterServer", "evaluator"))}
    job = {path.split(".")[0] for path in (*CARRIED, *NOT_USED)}
    assert job <= ai.TRAINING_INPUT_KEYS
    assert ai.TRAINING_INPUT_KEYS - cluster - job == {"scaleTier", "hyperparameters"}
