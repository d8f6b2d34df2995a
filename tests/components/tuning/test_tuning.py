"""Hyperparameter tuning: the study's declaration and its checks, AI Platform's
`hyperparameters`, the trainer's reports (cloudml-hypertune), Open Source Vizier's study on
one machine, and `run --local` with an AI Platform config.yaml that tunes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.tuning.local_study import (
    METRIC_FILE_ENV,
    StudyError,
    Trial,
    best_trial,
    final_measurement,
    last_measurement,
    measurements,
    median_rule,
    parallel_slots,
    run_study,
)
from components.tuning.trials import study_record, trials_table
from components.tuning.tuning_options import TuningOptions
from pipelines.config import ConfigError
from pipelines.config_loading import load_config
from tests.support.facts import figures, missing
from trainer.common.schema import OptionsError, validate

# Exercised here without an import, through config loading and `run --local`:
# `components.tuning.ai_platform_study` (AI Platform's hyperparameters),
# `components.tuning.tune_locally` (each trial a local cluster).

BIN = Path(sys.executable).parent / "gpu-pipeline"

LR = {"name": "learning_rate", "type": "DOUBLE", "min_value": 0.0001, "max_value": 0.1,
      "scale": "UNIT_LOG_SCALE"}


def study(**fields) -> TuningOptions:
    return validate(TuningOptions, {"parameters": [LR], **fields}, prefix="tuning")


@pytest.mark.parametrize("tuning, message", [
    ({"parameters": [{**LR, "min_value": 0.0}]},
     "tuning.parameters[0].min_value is 0 (learning_rate); a UNIT_LOG_SCALE needs a positive "
     "minimum"),
    ({"parameters": [{**LR, "min_value": 0.5, "max_value": 0.1}]},
     "tuning.parameters[0].min_value is 0.5 (learning_rate); expected a minimum below "
     "max_value (0.1)"),
    ({"parameters": [{**LR, "name": "dropout"}]},
     "tuning.parameters[0].name is 'dropout', which is not a training option a study can "
     "search; valid: epochs, batch_size, learning_rate"),
    ({"parameters": [{**LR, "name": "seed"}]}, "tuning.parameters[0].name is 'seed'"),
    ({"parameters": [{**LR, "name": "batch_size"}]},
     "tuning.parameters[0].type is DOUBLE, but batch_size is not a number option of that "
     "kind; use INTEGER or DISCRETE"),
    ({"parameters": [{"name": "batch_size", "type": "DISCRETE", "values": [64, 16]}]},
     "tuning.parameters[0].values is [64, 16] (batch_size); Vertex AI needs DISCRETE values "
     "in increasing order"),
    ({"parameters": [{"name": "model", "type": "CATEGORICAL", "values": ["cnn", "vgg"]}]},
     "tuning.parameters[0].values would try a value the training option refuses: "
     "training.model is 'vgg'; expected one of cnn, resnet50"),
    ({"parameters": [{**LR, "max_value": 20.0}]},
     "would try a value the training option refuses: training.learning_rate is 20.0; "
     "expected a finite number in (0, 10]"),
    ({"parameters": [{"name": "epochs", "type": "INTEGER", "min_value": 1.5,
                      "max_value": 4.0}]},
     "tuning.parameters[0].min_value is 1.5 and max_value 4 (epochs); an INTEGER range has "
     "whole-number ends"),
    ({"parameters": [LR, LR]}, "tuning.parameters name learning_rate more than once"),
    ({"parameters": [LR], "metric": "val_loss"},
     "tuning.goal is MAXIMIZE for the metric val_loss; a loss is minimized"),
    ({"parameters": [LR], "metric": "f1"}, "tuning.metric is 'f1'; expected one of "
                                           "val_accuracy, val_loss, accuracy, loss"),
    ({"parameters": [LR], "algorithm": "GRID_SEARCH"},
     "tuning.algorithm is GRID_SEARCH, which cannot search DOUBLE parameters"),
    ({"parameters": [LR], "max_trials": 2, "parallel_trials": 3},
     "tuning.parallel_trials is 3, more than max_trials (2)"),
])
def test_bad_studies_are_refused_naming_the_parameter_and_the_rule(tuning, message):
    with pytest.raises(OptionsError) as error:
        validate(TuningOptions, tuning, prefix="tuning")
    assert message in str(error.value)


def test_values_are_checked_with_the_rest_of_the_training_options():
    with pytest.raises(ConfigError) as error:
        load_config(overrides={"training": {"epochs": 3, "warmup_epochs": 2}, "tuning": {
            "parameters": [{"name": "epochs", "type": "INTEGER", "min_value": 2.0,
                            "max_value": 6.0}]}})
    assert not missing(str(error.value), "tuning.parameters[0] (epochs)", "would try 2",
                       "training.warmup_epochs is 2")


AI_PLATFORM = {"trainingInput": {
    "scaleTier": "CUSTOM", "masterType": "n1-standard-8",
    "masterConfig": {"acceleratorConfig": {"count": 1, "type": "NVIDIA_TESLA_T4"}},
    "hyperparameters": {
        "goal": "MAXIMIZE", "hyperparameterMetricTag": "val_accuracy", "maxTrials": 3,
        "maxParallelTrials": 1, "maxFailedTrials": 2, "enableTrialEarlyStopping": False,
        "algorithm": "RANDOM_SEARCH",
        "params": [
            {"parameterName": "learning_rate", "type": "DOUBLE", "minValue": 0.0005,
             "maxValue": 0.01, "scaleType": "UNIT_LOG_SCALE"},
            {"parameterName": "batch-size", "type": "DISCRETE",
             "discreteValues": [16, 32]}]}}}


def test_ai_platform_hyperparameters_become_the_tuning_section(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(AI_PLATFORM))
    tuning = load_config(path).tuning
    assert (tuning.metric, tuning.goal, tuning.max_trials, tuning.parallel_trials,
            tuning.max_failed_trials, tuning.algorithm, tuning.early_stopping) == (
        "val_accuracy", "MAXIMIZE", 3, 1, 2, "RANDOM_SEARCH", False)
    lr, batch = tuning.parameters
    assert (lr.name, lr.type, lr.min_value, lr.max_value, lr.scale) == (
        "learning_rate", "DOUBLE", 0.0005, 0.01, "UNIT_LOG_SCALE")
    assert (batch.name, batch.type, batch.values) == ("batch_size", "DISCRETE", [16, 32])

    spec = AI_PLATFORM["trainingInput"]["hyperparameters"]
    path.write_text(yaml.safe_dump({"trainingInput": {
        **AI_PLATFORM["trainingInput"], "hyperparameters": {
            **spec, "enableTrialEarlyStopping": True}}}))
    assert load_config(path).tuning.early_stopping is True
    path.write_text(yaml.safe_dump({"trainingInput": {
        **AI_PLATFORM["trainingInput"], "hyperparameters": {
            **spec, "resumePreviousJobId": "job_1",
            "params": [{**spec["params"][0], "minValue": 0.0, "stepSize": 2}]}}}))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    text = str(error.value)
    assert "trainingInput.hyperparameters.resumePreviousJobId is not converted: resuming" in text
    assert "trainingInput.hyperparameters.params[0].stepSize is not a ParameterSpec field" \
        in text


def test_submit_dry_run_sends_the_study_with_the_spec_that_runs_it(tmp_path, capsys):
    """An AI Platform config.yaml with `hyperparameters`: the request holds the tuning job
    step and the study as the `tuning` parameter (the emulated run is in
    tests/pipelines/vertex/test_emulated_tuning.py)."""
    from pipelines.cli import main

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(AI_PLATFORM))
    assert main(["submit", "--dry-run", "--verbose", "--config", str(path), "--project",
                 "my-project", "--pipeline-root", "gs://my-bucket/root", "--image-repository",
                 "us-central1-docker.pkg.dev/my-project/images"]) == 0
    out = capsys.readouterr().out
    request, _ = json.JSONDecoder().raw_decode(out[out.rindex('{\n  "parent"'):])
    job = request["pipelineJob"]
    study_value = job["runtimeConfig"]["parameterValues"]["tuning"]
    assert [p["name"] for p in study_value["parameters"]] == ["learning_rate", "batch_size"]
    tasks = job["pipelineSpec"]["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert {"vertex-tuning-spec", "hyperparameter-tuning-job", "best-vertex-trial"} <= set(tasks)
    assert "tuning: a HyperparameterTuningJob of 3 trial(s), 1 at a time, on the training " \
           "pools, searching learning_rate, batch_size by val_accuracy, each trial measured by " \
           "its last report (study_spec_measurement_selection_type LAST_MEASUREMENT)" in out
    # The op is told how trials are measured (gcpc 2.22 would otherwise use its default,
    # BEST_MEASUREMENT, while the local study takes the last report).
    inputs = job["pipelineSpec"]["components"]["comp-exit-handler-1"]["dag"]["tasks"][
        "hyperparameter-tuning-job"]["inputs"]["parameters"]
    assert inputs["study_spec_measurement_selection_type"]["taskOutputParameter"] == {
        "outputParameterKey": "study_spec_measurement_selection_type",
        "producerTask": "vertex-tuning-spec"}

    # Early stopping runs on this machine only: gcpc's op sends no stopping spec.
    spec = AI_PLATFORM["trainingInput"]["hyperparameters"]
    path.write_text(yaml.safe_dump({"trainingInput": {
        **AI_PLATFORM["trainingInput"], "hyperparameters": {
            **spec, "enableTrialEarlyStopping": True}}}))
    assert main(["submit", "--dry-run", "--verbose", "--config", str(path), "--project",
                 "my-project", "--pipeline-root", "gs://my-bucket/root", "--image-repository",
                 "us-central1-docker.pkg.dev/my-project/images"]) == 2
    assert main(["compile", "--config", str(path), "--output", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("tuning.early_stopping is true, which only a study on this machine can "
                     "do") == 2
    assert "Traceback" not in err and not (tmp_path / "s.yaml").exists()


# --- the study on one machine, with a stand-in for the trainer ----------------------


def fake_trainer(fail_when=lambda trial_id: False):
    """Trains nothing: reports, as the trainer does (cloudml-hypertune, one line per
    epoch), a metric that peaks at learning_rate 0.003."""
    def run(trial_id, parameters, args, env, cores, job_dir, stop):
        assert args[:2] == ["--hypertune-metric", "val_accuracy"]
        i = args.index("--learning_rate")  # Vertex AI's form, after the job's arguments
        assert float(args[i + 1]) == parameters["learning_rate"]
        assert cores
        if fail_when(trial_id):
            raise RuntimeError(f"trial {trial_id} crashed")
        os.environ[METRIC_FILE_ENV] = env[METRIC_FILE_ENV]
        import hypertune

        reporter = hypertune.HyperTune()
        value = 1.0 - (math.log10(parameters["learning_rate"]) - math.log10(0.003)) ** 2
        for epoch in (1, 2):
            reporter.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag="val_accuracy", metric_value=value - 0.1 / epoch,
                global_step=epoch)
    return run


def test_vizier_suggests_trials_and_the_best_reported_metric_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(METRIC_FILE_ENV, "unset")
    tuning = study(max_trials=5, parallel_trials=2, algorithm="RANDOM_SEARCH")
    trials = run_study(tuning, fake_trainer(), str(tmp_path), processes_per_trial=1,
                       cores=[0, 1], log=lambda line: None)
    assert len(trials) == 5 and all(t.state == "SUCCEEDED" for t in trials)
    assert len({t.parameters["learning_rate"] for t in trials}) == 5
    assert all(0.0001 <= t.parameters["learning_rate"] <= 0.1 for t in trials)
    for t in trials:  # the final measurement is the last report
        expected = 1.0 - (math.log10(t.parameters["learning_rate"]) - math.log10(0.003)) ** 2
        assert t.metric == pytest.approx(expected - 0.05, abs=1e-6)
        assert last_measurement(os.path.join(t.job_dir, "hypertune", "output.metrics"),
                                "val_accuracy") == t.metric
    best = best_trial(tuning, trials)
    assert best.metric == max(t.metric for t in trials)
    record = study_record(tuning, trials)
    assert record["best_parameters"] == best.parameters
    table = trials_table(record)
    assert f"| {best.trial_id} **best** |" in table and table.count("SUCCEEDED") == 5


def test_failed_trials_count_against_max_failed_trials(tmp_path):
    tuning = study(max_trials=4, max_failed_trials=2, algorithm="RANDOM_SEARCH")
    with pytest.raises(StudyError) as failed:
        run_study(tuning, fake_trainer(lambda trial_id: True), str(tmp_path),
                  processes_per_trial=2, cores=[0, 1], log=lambda line: None)
    assert not missing(str(failed.value), "2 of 2 trial(s)", "max_failed_trials 2",
                       "trial 1 crashed")
    # Failures below the limit are recorded, and the study goes on.
    trials = run_study(study(max_trials=3, max_failed_trials=3, algorithm="RANDOM_SEARCH"),
                       fake_trainer(lambda trial_id: trial_id == "2"), str(tmp_path / "b"),
                       processes_per_trial=1, cores=[0], log=lambda line: None)
    assert [t.state for t in trials] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]
    assert trials[1].metric is None and trials[1].error == "trial 2 crashed"
    assert best_trial(study(), trials).state == "SUCCEEDED"


def epoch_trainer(epochs: int = 4, seconds: float = 0.4):
    """Reports each epoch's val_accuracy as the trainer does, `seconds` apart, a curve that
    rises towards a level that peaks at learning_rate 0.003; stops when asked, as a local
    cluster does (with an error)."""
    def run(trial_id, parameters, args, env, cores, job_dir, stop):
        os.environ[METRIC_FILE_ENV] = env[METRIC_FILE_ENV]
        import hypertune

        reporter = hypertune.HyperTune()
        level = 1.0 - (math.log10(parameters["learning_rate"]) - math.log10(0.003)) ** 2
        for epoch in range(1, epochs + 1):
            if stop.wait(seconds):
                raise RuntimeError("training was stopped on request")
            reporter.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag="val_accuracy", metric_value=level - 0.1 / epoch,
                global_step=epoch)
    return run


def test_median_rule_stops_trials_worse_than_the_completed_ones_at_the_same_epoch():
    completed = [[(1, 0.5), (2, 0.7), (3, 0.9)], [(1, 0.3), (2, 0.5), (3, 0.7)],
                 [(1, 0.1), (2, 0.2), (3, 0.3)]]
    # At epoch 2 the running averages are 0.6, 0.4 and 0.15: the median is 0.4.
    stopped = median_rule([(1, 0.2), (2, 0.39)], completed, "MAXIMIZE")
    assert figures(stopped) == [2, 0.39, 0.4, 3]  # epoch, its best, the median, trials
    assert median_rule([(1, 0.2), (2, 0.4)], completed, "MAXIMIZE") == ""  # not strictly
    assert median_rule([(1, 0.45), (2, 0.1)], completed, "MAXIMIZE") == ""  # its best counts
    assert median_rule([(1, 0.2)], [], "MAXIMIZE") == ""  # nothing to compare with
    assert median_rule([], completed, "MAXIMIZE") == ""
    losses = [[(1, 1.0), (2, 0.6)], [(1, 2.0), (2, 1.6)]]  # running averages 0.8 and 1.8
    assert figures(median_rule([(1, 1.5), (2, 1.4)], losses, "MINIMIZE"))[:3] == [2, 1.4, 1.3]
    assert median_rule([(1, 1.5), (2, 1.2)], losses, "MINIMIZE") == ""


def test_early_stopping_ends_worse_trials_with_their_last_report(tmp_path, monkeypatch):
    # Looks at the reports 8 times an epoch: a worse trial is stopped after its first.
    monkeypatch.setattr("components.tuning.local_study.POLL_SECONDS", 0.05)
    tuning = study(max_trials=4, algorithm="GRID_SEARCH", early_stopping=True, parameters=[
        {"name": "learning_rate", "type": "DISCRETE", "values": [0.0001, 0.001, 0.003, 0.03]}])
    lines = []
    trials = run_study(tuning, epoch_trainer(), str(tmp_path), processes_per_trial=1,
                       cores=[0], log=lines.append)
    assert all(t.state == "SUCCEEDED" for t in trials) and len(trials) == 4
    stopped = [t for t in trials if t.stopped]
    assert stopped, lines
    for t in trials:
        reports = measurements(os.path.join(t.job_dir, "hypertune", "output.metrics"),
                               "val_accuracy")
        assert t.metric == reports[-1][1]  # the last report is the final measurement
        assert (len(reports) < 4) == bool(t.stopped)
        if t.stopped:
            assert f"tuning: trial {t.trial_id} stopped early: at epoch " in "\n".join(lines)
    # Those completed before it ran: the rule stopped exactly the trials it should have.
    for index, t in enumerate(trials):
        earlier = [measurements(os.path.join(e.job_dir, "hypertune", "output.metrics"),
                                "val_accuracy") for e in trials[:index]]
        reports = measurements(os.path.join(t.job_dir, "hypertune", "output.metrics"),
                               "val_accuracy")
        assert bool(median_rule(reports[:1], earlier, "MAXIMIZE")) == bool(t.stopped)
    best = best_trial(tuning, trials)
    assert best.parameters["learning_rate"] == 0.003 and not best.stopped
    table = trials_table(study_record(tuning, trials))
    assert table.count("SUCCEEDED (stopped early)") == len(stopped)


def test_a_stop_request_ends_a_local_cluster(small_dataset, tmp_path):
    """The trial's processes, the real trainer's, end soon after the request."""
    import threading
    import time

    from components.training.local_cluster import ClusterStopped, run_local_cluster
    from trainer.cluster.roles import Layout

    stop, seen = threading.Event(), []

    class Watch:
        def write(self, text):
            seen.append(text)
            if "epoch 1/" in text:
                stop.set()

        def flush(self):
            pass

    started = time.monotonic()
    with pytest.raises(ClusterStopped, match="stopped on request"):
        run_local_cluster(Layout(workers=1), ["--job-dir", str(tmp_path / "job"),
                                              "--data-dir", str(small_dataset),
                                              "--epochs", "50"], out=Watch(), stop=stop)
    assert stop.is_set() and time.monotonic() - started < 120
    assert not any("epoch 50/50" in line for line in seen)


def test_parallel_trials_are_bounded_by_the_cores():
    assert parallel_slots(4, 2, [0, 1]) == [[0, 1]]  # one 2-process trial fills 2 cores
    assert parallel_slots(4, 1, [0, 1]) == [[0], [1]]
    assert parallel_slots(2, 2, list(range(8))) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parallel_slots(3, 4, [0, 1]) == [[0, 1]]  # at least one trial


def test_a_trial_is_measured_by_its_last_or_best_report_as_the_study_says(tmp_path):
    from components.gpu.worker_pool import WorkerPool
    from components.tuning.vertex_study import tuning_job_spec

    metrics = tmp_path / "output.metrics"
    metrics.write_text("".join(json.dumps({"val_accuracy": v, "val_loss": 1 - v,
                                           "global_step": i}) + "\n"
                               for i, v in enumerate((0.5, 0.9, 0.7))))
    assert final_measurement(str(metrics), study()) == 0.7  # the default: the last report
    assert final_measurement(str(metrics), study(measurement="best")) == 0.9
    assert final_measurement(str(metrics), study(measurement="best", metric="val_loss",
                                                 goal="MINIMIZE")) == pytest.approx(0.1)
    images = {k: {"reference": f"r/{k}@sha256:" + "0" * 64} for k in ("gpu", "cpu")}
    pools = [WorkerPool(0, "n1-standard-4")]
    for measurement, sent in (("last", "LAST_MEASUREMENT"), ("best", "BEST_MEASUREMENT")):
        spec = tuning_job_spec(pools, images, dataset_path="/d", output_uri="gs://b/o",
                               output_path="/gcs/b/o", trainer_args=[],
                               tuning=study(measurement=measurement), job_name="job")
        assert spec["study_spec_measurement_selection_type"] == sent


def test_best_trial_follows_the_goal():
    trials = [Trial("1", {}, "SUCCEEDED", 0.5), Trial("2", {}, "SUCCEEDED", 0.2),
              Trial("3", {}, "FAILED")]
    assert best_trial(study(), trials).trial_id == "1"
    assert best_trial(study(metric="val_loss", goal="MINIMIZE"), trials).trial_id == "2"


# --- the real trainer and the real pipeline ------------------------------------------


def test_the_trainer_reports_each_epoch_and_takes_vertex_style_parameter_flags(
        small_dataset, tmp_path):
    metrics = tmp_path / "hypertune" / "output.metrics"
    env = {**os.environ, METRIC_FILE_ENV: str(metrics), "CLOUD_ML_TRIAL_ID": "7"}
    env.pop("TF_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "trainer.task", "--job-dir", str(tmp_path / "job"),
         "--data-dir", str(small_dataset), "--epochs", "2", "--hypertune-metric",
         "val_accuracy", "--learning_rate", "0.005", "--batch_size=16"],
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    reports = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["global_step"] for r in reports] == ["1", "2"]
    assert {r["trial"] for r in reports} == {"7"}
    history = json.loads((tmp_path / "job" / "history.json").read_text())
    assert float(reports[-1]["val_accuracy"]) == pytest.approx(
        history[-1]["val_accuracy"], rel=1e-6)
    assert "global batch 16" in result.stdout


@pytest.mark.slow
def test_run_local_with_an_ai_platform_config_that_tunes(tmp_path):
    """The AI Platform config.yaml drives the study (trials, best trial) and the final
    model, trained with the best parameters, through the gate."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(AI_PLATFORM))
    result = subprocess.run([str(BIN), "run", "--local", "--json", "--config", str(path),
                             "--epochs", "1"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = json.loads(result.stdout.strip().splitlines()[-1])
    study_run = run["tuning"]
    assert len(study_run["trials"]) == 3 and study_run["metric"] == "val_accuracy"
    succeeded = [t for t in study_run["trials"] if t["state"] == "SUCCEEDED"]
    best = max(succeeded, key=lambda t: t["metric"])
    assert study_run["best_trial"] == best["trial_id"]
    assert study_run["best_parameters"] == best["parameters"]
    # The final model was trained with the best parameters, and says so.
    lineage = json.loads((Path(run["model_uri"]) / "lineage.json").read_text())
    assert lineage["training"]["learning_rate"] == pytest.approx(
        best["parameters"]["learning_rate"])
    assert lineage["training"]["batch_size"] == int(best["parameters"]["batch_size"])
    assert lineage["tuning"]["best_trial"] == best["trial_id"]
    assert lineage["tuning"]["trials"] == 3
    assert "## Hyperparameter tuning: 3 trial(s)" in run["summary"]
    trials_md = Path(run["artifacts"]["tune-on-local-workers/trials"]).read_text()
    assert f"| {best['trial_id']} **best** |" in trials_md
    assert "tuning: best trial " + best["trial_id"] in result.stdout
