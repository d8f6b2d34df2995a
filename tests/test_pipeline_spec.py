"""The compiled Vertex AI spec: golden file, stage order, and run-time worker pools."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.compile import compile_pipeline, normalised_spec

COMMITTED = Path(__file__).resolve().parent.parent / "compiled" / "gpu_training_pipeline.yaml"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    return compile_pipeline(tmp_path_factory.mktemp("spec") / "spec.yaml")


def test_committed_spec_is_current(fresh):
    assert COMMITTED.is_file(), "run `make compile` and commit compiled/"
    assert normalised_spec(fresh) == normalised_spec(COMMITTED), \
        "compiled/ is stale: run `make compile` and commit the result"


def test_compiling_is_byte_stable(fresh):
    # This process hashes strings differently from the one that wrote compiled/, so an
    # order that depends on hashing would show up here.
    def lines(path):
        return [l for l in path.read_text().splitlines() if not l.startswith("sdkVersion:")]

    assert lines(fresh) == lines(COMMITTED)


def test_normalisation_ignores_only_the_sdk_version(fresh, tmp_path):
    text = fresh.read_text()
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("sdkVersion: kfp-", "sdkVersion: kfp-0.0.0-"))
    assert normalised_spec(other) == normalised_spec(fresh)
    other.write_text(text.replace("n1-standard-8", "n1-standard-16"))
    assert normalised_spec(other) != normalised_spec(fresh)


def test_five_stages_in_order(fresh):
    tasks = yaml.safe_load(fresh.read_text())["root"]["dag"]["tasks"]

    def upstream(name, seen=None):
        seen = set() if seen is None else seen
        for dep in tasks[name].get("dependentTasks", []):
            if dep not in seen:
                seen.add(dep)
                upstream(dep, seen)
        return seen

    order = ["prepare-dataset", "validate-gpu-config", "build-trainer-image",
             "custom-training-job", "export-model"]
    assert "custom-training-job" in upstream("report-training")
    for earlier, later in zip(order, order[1:]):
        assert earlier in upstream(later), (earlier, later)


def test_training_is_a_custom_job_with_run_time_worker_pools(fresh):
    spec = yaml.safe_load(fresh.read_text())
    tasks = spec["root"]["dag"]["tasks"]
    job = tasks["custom-training-job"]
    pools = job["inputs"]["parameters"]["worker_pool_specs"]
    assert pools == {"taskOutputParameter": {"outputParameterKey": "worker_pool_specs",
                                             "producerTask": "vertex-training-spec"}}
    assert tasks["vertex-training-spec"]["inputs"]["parameters"]["worker_pool_specs"] == \
        {"taskOutputParameter": {"outputParameterKey": "Output",
                                 "producerTask": "validate-gpu-config"}}
    assert tasks["validate-gpu-config"]["inputs"]["parameters"]["worker_pool_specs"] == \
        {"componentInputParameter": "worker_pool_specs"}
    assert job["inputs"]["parameters"]["location"] == {"componentInputParameter": "region"}
    assert job["componentRef"]["name"] == "comp-custom-training-job"
    executors = spec["deploymentSpec"]["executors"]
    assert "google-cloud-pipeline-components" in executors["exec-custom-training-job"][
        "container"]["image"]
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert {"worker_pool_specs", "region", "service_account", "network", "epochs",
            "batch_size", "restart_job_on_worker_restart", "scheduling_strategy", "timeout",
            "tensorboard", "trainer_source_uri"} <= set(params)
    for name, field in (("service_account", "service_account"), ("network", "network"),
                        ("restart_job_on_worker_restart", "restart_job_on_worker_restart"),
                        ("scheduling_strategy", "strategy"), ("timeout", "timeout"),
                        ("tensorboard", "tensorboard")):
        assert job["inputs"]["parameters"][field] == {"componentInputParameter": name}
    assert job["inputs"]["parameters"]["base_output_directory"]["taskOutputParameter"][
        "producerTask"] == "vertex-training-spec"
    assert {"model", "metrics"} == set(spec["root"]["outputDefinitions"]["artifacts"])


def test_a_model_that_passes_the_threshold_is_registered(fresh):
    spec = yaml.safe_load(fresh.read_text())
    condition = spec["root"]["dag"]["tasks"]["condition-1"]
    assert condition["triggerPolicy"]["condition"] == (
        "inputs.parameter_values['pipelinechannel--export-model-accuracy'] >= "
        "inputs.parameter_values['pipelinechannel--accuracy_threshold']")
    components = spec["components"]
    assert {"comp-model-upload", "comp-model-upload-2"} <= set(components)  # new model / version
    executors = spec["deploymentSpec"]["executors"]
    serving = next(e["importer"] for e in executors.values() if "importer" in e
                   and e["importer"]["typeSchema"]["schemaTitle"] == "google.UnmanagedContainerModel")
    assert serving["metadata"]["containerSpec"]["imageUri"].startswith("{{$.inputs.parameters")
    uploads = [e for name, e in executors.items() if name.startswith("exec-model-upload")]
    assert len(uploads) == 2
    assert all("google-cloud-pipeline-components" in e["container"]["image"] for e in uploads)
