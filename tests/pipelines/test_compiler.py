"""The compiled Vertex AI spec: golden file, stage order, and run-time worker pools."""

from __future__ import annotations

import pytest
import yaml

from components.ops import names
from pipelines.compiler import compile_pipeline, normalised_spec
from tests.support.paths import ROOT

# Exercised here without an import, in every compiled spec: `pipelines.serving_stages`
# (registration, deploy, batch and the exit handler's tasks).

COMMITTED = ROOT / "compiled" / "gpu_training_pipeline.yaml"


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
        return [line for line in path.read_text().splitlines()
                if not line.startswith("sdkVersion:")]

    assert lines(fresh) == lines(COMMITTED)


def test_normalisation_ignores_only_the_sdk_version(fresh, tmp_path):
    text = fresh.read_text()
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("sdkVersion: kfp-", "sdkVersion: kfp-0.0.0-"))
    assert normalised_spec(other) == normalised_spec(fresh)
    other.write_text(text.replace("n1-standard-8", "n1-standard-16"))
    assert normalised_spec(other) != normalised_spec(fresh)


def _stages(spec):
    """The tasks of the five stages: everything inside the exit handler."""
    return spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]


def _upstream(tasks, name, seen=None):
    seen = set() if seen is None else seen
    for dep in tasks[name].get("dependentTasks", []):
        if dep not in seen:
            seen.add(dep)
            _upstream(tasks, dep, seen)
    return seen


def test_stages_run_in_order_validation_first(fresh):
    tasks = _stages(yaml.safe_load(fresh.read_text()))
    # Nothing is spent before the GPU configuration is known to be valid.
    assert not tasks["validate-gpu-config"].get("dependentTasks")
    for later in ("fingerprint-dataset-source", "prepare-dataset", "build-images"):
        assert "validate-gpu-config" in _upstream(tasks, later), later
    # The image is built while the dataset is prepared; training needs both.
    assert "prepare-dataset" not in _upstream(tasks, "build-images")
    assert {"prepare-dataset", "build-images"} <= _upstream(tasks, "train-on-vertex-ai")
    assert "train-on-vertex-ai" in _upstream(tasks, "report-training")
    assert "report-training" in _upstream(tasks, "export-model")


@pytest.mark.slow
def test_with_the_beam_engine_the_dataset_stage_starts_dataflow_on_the_built_image(tmp_path):
    from pipelines.config import Config
    from pipelines.pipeline import resources_of

    config = Config.model_validate({"dataset": {"engine": "beam"}})
    spec = yaml.safe_load(compile_pipeline(tmp_path / "spec.yaml",
                                           resources=resources_of(config)).read_text())
    tasks = _stages(spec)
    # The Dataflow workers run the CPU image by the digest the build stage outputs.
    launch = tasks["dataflow-launch"]
    assert launch["dependentTasks"] == ["build-images"]
    assert launch["inputs"]["parameters"]["images"] == {"taskOutputParameter": {
        "outputParameterKey": "Output", "producerTask": "build-images"}}
    assert launch["inputs"]["parameters"]["project"] == {"componentInputParameter":
                                                         "pipelinechannel--project"}
    assert launch["cachingOptions"] == {}
    prepare = tasks["prepare-dataset"]
    assert prepare["inputs"]["parameters"]["dataflow"] == {"taskOutputParameter": {
        "outputParameterKey": "Output", "producerTask": "dataflow-launch"}}
    assert {"build-images", "validate-gpu-config"} <= _upstream(tasks, "prepare-dataset")
    assert prepare["cachingOptions"] == {"enableCache": True}
    # The component only waits for Dataflow: no 8-CPU machine for it.
    executor = spec["deploymentSpec"]["executors"]["exec-prepare-dataset"]["container"]
    assert "resources" not in executor
    assert "Dataflow" in spec["pipelineInfo"]["description"]
    # The default (local engine) spec has neither.
    local = yaml.safe_load(compile_pipeline(tmp_path / "local.yaml").read_text())
    assert "dataflow-launch" not in _stages(local)
    assert "dataflow" not in _stages(local)["prepare-dataset"]["inputs"]["parameters"]


def test_the_input_pipelines_come_from_the_validated_pools_at_run_time(fresh):
    tasks = _stages(yaml.safe_load(fresh.read_text()))
    assert tasks["prepare-dataset"]["inputs"]["parameters"]["input_pipelines"] == {
        "taskOutputParameter": {"outputParameterKey": "input_pipelines",
                                "producerTask": "validate-gpu-config"}}


def test_training_is_the_launcher_with_run_time_alternatives(fresh):
    spec = yaml.safe_load(fresh.read_text())
    tasks = _stages(spec)
    job = tasks["train-on-vertex-ai"]
    parameters = job["inputs"]["parameters"]
    # Stage 1's checked alternatives (the primary pools, then vertex.fallbacks), read at
    # run time; the settings from the `vertex` parameter.
    assert parameters["alternatives"] == {"taskOutputParameter": {
        "outputParameterKey": "alternatives", "producerTask": "validate-gpu-config"}}
    assert parameters["vertex"] == {"componentInputParameter": "pipelinechannel--vertex"}
    assert parameters["project"] == {"componentInputParameter": "pipelinechannel--project"}
    assert tasks["validate-gpu-config"]["inputs"]["parameters"]["vertex"] == \
        {"componentInputParameter": "pipelinechannel--vertex"}
    # The model and the export read what trained: the launcher's outputs, not stage 1's.
    assert tasks["importer"]["inputs"]["parameters"]["uri"] == {"taskOutputParameter": {
        "outputParameterKey": "model_uri", "producerTask": "train-on-vertex-ai"}}
    export = tasks["export-model"]["inputs"]["parameters"]
    for name in ("worker_pool_specs", "training_plan", "strategy", "capacity"):
        assert export[name] == {"taskOutputParameter": {
            "outputParameterKey": name, "producerTask": "train-on-vertex-ai"}}, name
    # The project's own image runs it, not gcpc's launcher image.
    image = spec["deploymentSpec"]["executors"]["exec-train-on-vertex-ai"]["container"]["image"]
    assert "google-cloud-pipeline-components" not in image


def test_an_exit_handler_reports_every_run_whatever_its_outcome(fresh):
    spec = yaml.safe_load(fresh.read_text())
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"exit-handler-1", "summarize-run"}
    notify = tasks["summarize-run"]
    assert notify["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    assert notify["dependentTasks"] == ["exit-handler-1"]
    assert notify["inputs"]["parameters"]["status"] == {
        "taskFinalStatus": {"producerTask": "exit-handler-1"}}
    # KFP allows no pipeline outputs from inside an exit handler.
    assert "outputDefinitions" not in spec["root"]


def test_notification_emails_compile_to_vertex_email_notifications(tmp_path):
    from pipelines.config import Config
    from pipelines.pipeline import resources_of

    config = Config.model_validate({"vertex": {"notification_emails": [
        "ml-team@example.com", "oncall@example.com"]}})
    spec = yaml.safe_load(compile_pipeline(tmp_path / "spec.yaml",
                                           resources=resources_of(config)).read_text())
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"exit-handler-1", "vertex-pipelines-notification-email",
                          "summarize-run"}
    email = tasks["vertex-pipelines-notification-email"]
    assert email["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    assert email["inputs"]["parameters"]["recipients"] == {"runtimeValue": {"constant": [
        "ml-team@example.com", "oncall@example.com"]}}
    assert email["inputs"]["parameters"]["pipeline_task_final_status"] == {
        "taskFinalStatus": {"producerTask": "exit-handler-1"}}
    # The summary, which gives the champion back a canary's traffic, runs beside it as an
    # exit task would: after the run's group whatever its outcome, with its final status.
    summary = tasks["summarize-run"]
    assert summary["triggerPolicy"] == email["triggerPolicy"]
    assert summary["dependentTasks"] == email["dependentTasks"] == ["exit-handler-1"]
    assert summary["inputs"]["parameters"]["status"] == {
        "taskFinalStatus": {"producerTask": "exit-handler-1"}}


def test_options_are_dict_parameters_with_every_default(fresh):
    from pipelines.config import Config

    params = yaml.safe_load(fresh.read_text())["root"]["inputDefinitions"]["parameters"]
    assert set(params) == {"project", "dataset", "training", "vertex", "trainer_source_uri"}
    config = Config()
    assert params["dataset"]["defaultValue"] == config.dataset.model_dump()
    assert params["training"]["defaultValue"] == config.training_options().model_dump()
    assert params["vertex"]["defaultValue"] == config.vertex_options().model_dump()


@pytest.mark.slow
def test_the_model_is_registered_as_the_gate_decided(fresh):
    spec = yaml.safe_load(fresh.read_text())
    stages = _stages(spec)
    condition = stages["condition-2"]
    assert condition["taskInfo"]["name"] == "gate-registers"
    assert condition["triggerPolicy"]["condition"] == (
        "inputs.parameter_values['pipelinechannel--decide-registration-register'] == true")
    decision = stages[names.DECIDE_REGISTRATION]["inputs"]["parameters"]
    for decided in ("register", "default"):
        assert decision[decided] == {"taskOutputParameter": {
            "outputParameterKey": decided, "producerTask": "export-model"}}
    components = spec["components"]
    assert {"comp-model-upload", "comp-model-upload-2"} <= set(components)  # new model / version
    executors = spec["deploymentSpec"]["executors"]
    serving = next(e["importer"] for e in executors.values() if "importer" in e and
                   e["importer"]["typeSchema"]["schemaTitle"] == "google.UnmanagedContainerModel")
    assert serving["metadata"]["containerSpec"]["imageUri"].startswith("{{$.inputs.parameters")
    uploads = [e for name, e in executors.items() if name.startswith("exec-model-upload")]
    assert len(uploads) == 2
    assert all("google-cloud-pipeline-components" in e["container"]["image"] for e in uploads)


def test_no_step_installs_anything_when_it_runs(fresh):
    """Inside a VPC Service Controls perimeter nothing reaches PyPI: a component that
    installs packages at start-up fails there (kubeflow/pipelines#6738, #9011). Every step
    runs what its image holds: the project's own components in the project's images
    (`install_kfp_package=False`), gcpc's in gcpc's image, the rest as its launchers."""
    executors = yaml.safe_load(fresh.read_text())["deploymentSpec"]["executors"]
    assert executors
    for name, executor in executors.items():
        container = executor.get("container")
        if container is None:  # the importers: no container at all
            assert "importer" in executor, name
            continue
        run = " ".join(container.get("command", []) + container.get("args", []))
        for installer in ("pip install", "pip3 install", "apt-get", "conda install", "npm "):
            assert installer not in run, (name, installer)
