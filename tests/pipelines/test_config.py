"""Configuration: defaults, YAML, overrides, and errors that name field, value and fix."""

from __future__ import annotations

import pydantic
import pytest

from components.dataset.dataset_options import DatasetOptions
from pipelines.config import Config, ConfigError
from pipelines.config_loading import load_config
from tests.support.paths import ROOT
from trainer.cluster.roles import Layout


def test_defaults_are_valid_and_frozen():
    config = load_config()
    assert config == Config()
    assert config.local.training_machines is None  # as the Vertex AI pools:
    assert config.local_layout().training_machines == 2  # the chief and one worker
    assert config.dataset.num_shards == 0  # planned from the worker count and data size
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.training.epochs = 3


def test_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  epochs: 3\n  batch_size: 16\nvertex:\n  region: europe-west4\n")
    config = load_config(path, {"training": {"epochs": 5, "batch_size": None}})
    assert config.training.epochs == 5  # the flag wins over the file
    assert config.training.batch_size == 16  # an unset flag keeps the file's value
    assert config.vertex.region == "europe-west4"


def test_every_problem_is_listed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "dataset:\n  validation_fraction: 1.5\n  num_shards: 1\n"
        "training:\n  epochs: 'ten'\n  local_workers: 2\n  colour: red\n"
        "vertex:\n  region: us-central1\n  worker_pool_specs:\n"
        "    - machine_spec: {machine_type: n1-standard-4, accelerator_type: NVIDIA_TESLA_T4,"
        " accelerator_count: 3}\n"
        "extra: {}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    for expected in ("unknown section 'extra'",
                     "unknown field training.colour; valid fields of training are augment, "
                     "batch_size",
                     "training.epochs is 'ten'; expected an integer",
                     "dataset.validation_fraction is 1.5; expected a finite number in (0, 1)",
                     "dataset.num_shards is 1, fewer than local.training_machines (2)",
                     "vertex.worker_pool_specs[0] (chief): machine_spec.accelerator_count is 3"):
        assert expected in message
    for cron in ("0 0 3 * * 1", "TZ=Etc/UTC 0 3 * *"):  # seconds field; a field missing
        with pytest.raises(ConfigError, match="expected a cron expression of 5 fields"):
            load_config(overrides={"schedule": {"cron": cron}})
    with pytest.raises(ConfigError, match="time zone 'Mars/Olympus', which is not an IANA"):
        load_config(overrides={"schedule": {"cron": "TZ=Mars/Olympus 0 3 * * 1"}})
    for cron in ("0 3 * * 1", "CRON_TZ=Europe/Berlin 30 2 1 * *"):
        assert load_config(overrides={"schedule": {"cron": cron}}).schedule.cron == cron


def test_the_local_sections_old_keys_still_work_with_a_note(tmp_path):
    """`training.local_workers` and its siblings, from before the `local` section, are read
    as `local.*` with a deprecation warning; the `local` section wins over them."""
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  epochs: 2\n  local_workers: 3\n  local_evaluator: true\n")
    warnings: list[str] = []
    config = load_config(path, warnings=warnings)
    assert (config.local.training_machines, config.local.evaluator) == (3, True)
    assert config.local_layout() == Layout(workers=2, evaluators=1)
    assert f"training.local_workers ({path}) is deprecated: write local.training_machines " \
        "instead" in warnings
    warnings.clear()
    config = load_config(path, {"local": {"training_machines": 1}}, warnings)
    assert config.local.training_machines == 1
    assert f"training.local_workers ({path}) is deprecated and ignored: " \
        "local.training_machines (1) is set" not in warnings  # the flag came later
    assert config.training.epochs == 2
    path.write_text("training:\n  local_workers: 3\nlocal:\n  training_machines: 2\n")
    warnings.clear()
    assert load_config(path, warnings=warnings).local.training_machines == 2
    assert f"training.local_workers ({path}) is deprecated and ignored: " \
        "local.training_machines (2) is set" in warnings


def test_the_absolute_promotion_margin_is_ignored_with_a_note(tmp_path):
    """`vertex.promotion_margin` froze retraining (above 1 - margin nothing could beat a
    champion); an old config still loads, says so, and the paired test decides."""
    path = tmp_path / "c.yaml"
    path.write_text("vertex:\n  promotion_margin: 0.05\n  promotion: non_inferior\n")
    warnings: list[str] = []
    config = load_config(path, warnings=warnings)
    # The rule's earlier name is read as its name for what it does, said so.
    assert config.vertex.promotion == "unless_shown_worse"
    assert config.vertex.promotion_level == 0.05 and config.vertex.non_inferiority_margin == 0.1
    assert "promotion_margin" not in config.vertex.model_dump()
    renamed, note = warnings
    assert renamed.startswith(f"vertex.promotion non_inferior ({path}) is deprecated: it is "
                              "read as unless_shown_worse")
    assert note.startswith(f"vertex.promotion_margin ({path}) is deprecated and ignored: the "
                           "gate compares the two models' predictions image by image")
    # A spec compiled with the old name still runs its stages.
    from components.vertex_options import VertexOptions

    assert VertexOptions(promotion="non_inferior").promotion == "unless_shown_worse"
    with pytest.raises(ConfigError, match=r"vertex\.promotion_level is 0\.7"):
        load_config(overrides={"vertex": {"promotion_level": 0.7}})


def test_the_hash_distance_of_near_duplicates_is_ignored_with_a_note_everywhere(tmp_path):
    """`dataset.near_duplicate_distance` counted bits of a hash that thumbnails replaced:
    a config still loads with a note, and a spec compiled with it still runs its stage."""
    path = tmp_path / "c.yaml"
    path.write_text("dataset:\n  near_duplicate_distance: 4\n")
    warnings: list[str] = []
    config = load_config(path, warnings=warnings)
    assert config.dataset.near_duplicate_difference == 6.0
    (note,) = warnings
    assert note.startswith(f"dataset.near_duplicate_distance ({path}) is deprecated and "
                           "ignored")
    # What an older compiled spec passes to the component, unread but not refused.
    older = {**config.dataset.model_dump(), "near_duplicate_distance": 4}
    assert DatasetOptions.model_validate(older) == config.dataset


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("training: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_range_and_source_checks():
    with pytest.raises(ConfigError, match="local.training_machines is 99; expected an "
                                          "integer from 1 to 8"):
        load_config(overrides={"local": {"training_machines": 99}})
    with pytest.raises(ConfigError, match="dataset.source is '/no/such/dir'"):
        load_config(overrides={"dataset": {"source": "/no/such/dir"}})


def test_the_example_config_is_valid():

    example = ROOT / "config.example.yaml"
    config = load_config(example)
    assert config.vertex.project == "my-project" and config.training.model == "resnet50"
    assert config.vertex_training_machines() == 4  # the chief and 3 workers
    assert config.schedule.cron == "TZ=Etc/UTC 0 3 * * 1"


def test_vertex_and_schedule_values_are_checked():
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"vertex": {"scheduling_strategy": "CHEAP", "timeout": "1 day",
                                          "restart_job_on_worker_restart": "yes",
                                          "labels": {"Team": "x"},
                                          "parent_model": "models/1"},
                               "schedule": {"cron": "weekly"}})
    message = str(info.value)
    for expected in ("vertex.scheduling_strategy is 'CHEAP'; expected one of STANDARD, SPOT",
                     "vertex.timeout is '1 day'; expected a positive number of seconds like "
                     "'86400s'",
                     "vertex.restart_job_on_worker_restart is 'yes'; expected true or false",
                     "vertex.labels has 'Team': 'x'",
                     "vertex.parent_model is 'models/1'",
                     "schedule.cron is 'weekly'"):
        assert expected in message


def test_retraining_options_that_cannot_work_are_refused():
    with pytest.raises(ConfigError, match="vertex.parent_model is in europe-west4 but region "
                                          "is us-central1; the run registers the new version "
                                          "in its own region: give a model in us-central1, "
                                          "or set region to europe-west4"):
        load_config(overrides={"vertex": {
            "parent_model": "projects/p/locations/europe-west4/models/1"}})
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"vertex": {
            "tensorboard": "projects/p/locations/us-central1/tensorboards/1",
            "persistent_resource_id": "Fast Pool", "promotion": "always",
            "notification_emails": ["a@example.com", "not-an-email",
                                                             "c@example.com", "d@example.com"]}})
    message = str(info.value)
    for expected in ("vertex.tensorboard is 'projects/p/locations/us-central1/tensorboards/1' "
                     "but service_account is empty",
                     "vertex.persistent_resource_id is 'Fast Pool'",
                     "vertex.promotion is 'always'; expected one of default, unless_shown_worse, "
                     "version_only, never",
                     "vertex.notification_emails"):
        assert expected in message, message
    config = load_config(overrides={"vertex": {
        "tensorboard": "projects/p/locations/us-central1/tensorboards/1",
        "service_account": "trainer@p.iam.gserviceaccount.com",
        "persistent_resource_id": "fast-pool", "labels": {"team": "vision", "cost-center": "42"},
        "notification_emails": ["ml-team@example.com"], "promotion": "version_only"}})
    assert config.vertex.persistent_resource_id == "fast-pool"
    assert config.vertex_options().labels == {"team": "vision", "cost-center": "42"}


def test_patterned_values_are_refused_with_what_they_accept_in_words():
    with pytest.raises(ConfigError) as error:
        load_config(overrides={
            "dataset": {"dataflow_machine_type": "N2 big", "dataflow_network": "Bad_Net",
                        "dataflow_subnetwork": "sub"},
            "vertex": {"persistent_resource_id": "Bad", "component_cpu": "0.5",
                       "component_memory": "lots"}})
    lines = str(error.value).splitlines()
    for expected in (
            "dataset.dataflow_machine_type is 'N2 big'; expected a Compute Engine machine "
            "type, e.g. n2-standard-4 or n2-highcpu-16",
            "dataset.dataflow_network is 'Bad_Net'; expected a network name (lowercase "
            "letters, digits and hyphens, at most 63) or empty",
            "dataset.dataflow_subnetwork is 'sub'; expected regions/REGION/subnetworks/NAME, "
            "https://www.googleapis.com/compute/v1/projects/PROJECT/regions/REGION/"
            "subnetworks/NAME, or empty",
            "vertex.persistent_resource_id is 'Bad'; expected a resource ID (a lowercase "
            "letter, then lowercase letters, digits and hyphens, at most 63) or empty",
            "vertex.component_cpu is '0.5'; expected whole CPUs (e.g. 8) or millicpus (e.g. "
            "500m)",
            "vertex.component_memory is 'lots'; expected a size with K, M or G, e.g. 32G or "
            "512M"):
        assert f"  - {expected}" in lines, (expected, lines)


def test_an_ai_platform_configs_job_fields_are_carried_or_named(tmp_path):
    """Every field of a `trainingInput` either becomes the option that does the same or is
    named in a warning with what to do instead; a K80-era legacy type is refused with the
    configuration to paste."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "trainingInput:\n  scaleTier: CUSTOM\n  masterType: n1-standard-8\n  masterConfig:\n"
        "    imageUri: gcr.io/team/trainer:1\n"
        "    acceleratorConfig: {count: 1, type: NVIDIA_TESLA_T4}\n"
        "  region: us-east1\n  runtimeVersion: '2.11'\n  pythonVersion: '3.7'\n"
        "  args: ['--epochs', '3']\n  scheduling: {maxRunningTime: 7200s}\n"
        "  serviceAccount: trainer@my-proj.iam.gserviceaccount.com\n")
    warnings: list[str] = []
    config = load_config(path, warnings=warnings)
    assert (config.vertex.region, config.vertex.timeout,
            config.vertex.training_service_account) == (
        "us-east1", "7200s", "trainer@my-proj.iam.gserviceaccount.com")
    assert warnings == [
        "trainingInput.runtimeVersion ('2.11') is not used: the trainer image pins its own "
        "TensorFlow (requirements/gpu.lock): leave it out",
        "trainingInput.pythonVersion ('3.7') is not used: the trainer image pins its own "
        "Python: leave it out",
        "trainingInput.args (['--epochs', '3']) is not used: the trainer takes its options "
        "from the configuration's training section (training.epochs, training.batch_size, "
        "...): write them there",
        "trainingInput.masterConfig.imageUri ('gcr.io/team/trainer:1') is not used: the "
        "pipeline trains with its own trainer, in its own image (built by `submit`, named by "
        "digest); bring your model as training.user_code (docs/models.md)"]
    path.write_text("trainingInput:\n  scaleTier: BASIC_GPU\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    message = str(refused.value)
    assert "trainingInput.scaleTier is BASIC_GPU, a legacy AI Platform scale tier that " \
        "carries 1 x NVIDIA_TESLA_K80, which the trainer image cannot run" in message
    pasted = message.split("to paste in its place:\n", 1)[1]
    path.write_text(pasted)
    assert load_config(path).vertex.worker_pool_specs == [{"machine_spec": {
        "machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1}, "replica_count": 1}]


def test_a_job_timeout_past_vertex_ais_seven_day_default_is_warned_about():
    from pipelines.config_loading import load_config

    warnings: list[str] = []
    load_config(overrides={"vertex": {"timeout": "99999999s"}}, warnings=warnings)
    (said,) = [w for w in warnings if w.startswith("vertex.timeout")]
    assert "99999999s" in said and "1,157.4 days" in said and "604800s" in said
    for kept in ("604800s", "86400s"):
        warnings = []
        load_config(overrides={"vertex": {"timeout": kept}}, warnings=warnings)
        assert not [w for w in warnings if w.startswith("vertex.timeout")]


def test_the_legacy_paste_holds_only_what_the_pipeline_takes(tmp_path):
    """The source documents' complex_model_m_gpu example with runtimeVersion, pythonVersion
    and jobDir: the configuration offered to paste drops what the warnings say to drop,
    and validates."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "trainingInput:\n  scaleTier: CUSTOM\n  masterType: complex_model_m_gpu\n"
        "  workerType: complex_model_m_gpu\n  workerCount: 2\n  region: us-east1\n"
        "  runtimeVersion: '2.11'\n  pythonVersion: '3.7'\n  jobDir: gs://team/jobs\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    pasted = str(refused.value).split("to paste in its place:\n", 1)[1]
    for dropped in ("runtimeVersion", "pythonVersion", "jobDir"):
        assert dropped not in pasted
    path.write_text(pasted)
    warnings: list[str] = []
    config = load_config(path, warnings=warnings)
    assert [p["replica_count"] for p in config.vertex.worker_pool_specs] == [1, 2]
    assert not [w for w in warnings if "is not used" in w]
