"""The whole pipeline with KFP's local runner, as `make demo` runs it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.config import Config
from pipelines.local_run import LocalRunError, run_local

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent / "gpu-pipeline"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`gpu-pipeline run --local --json` on the embedded default, in an empty directory."""
    cwd = tmp_path_factory.mktemp("demo")
    temp = tmp_path_factory.mktemp("tmp")
    result = subprocess.run([str(BIN), "run", "--local", "--json"], cwd=cwd,
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TMPDIR": str(temp)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # KFP's runner writes every component's source to a temporary directory: removed.
    assert os.listdir(temp) == []
    return cwd, result.stdout


def test_demo_reaches_target_accuracy_from_the_exported_model(demo):
    cwd, stdout = demo
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["pipeline_root"] == str(cwd / "local_runs")
    assert summary["metrics"]["accuracy"] >= 0.90
    assert summary["metrics"]["test_accuracy"] >= 0.90
    manifest = json.loads((Path(summary["artifacts"]["prepare-dataset/dataset"]) /
                           "manifest.json").read_text())
    assert summary["metrics"]["examples"] == manifest["splits"]["validation"]["count"]
    assert summary["metrics"]["test_examples"] == manifest["splits"]["test"]["count"]
    assert manifest["examples"] == 1600 and not summary["dataset_reused"]
    model = Path(summary["model_uri"])
    assert (model / "saved_model.pb").is_file()
    evaluation = json.loads((model / "evaluation.json").read_text())
    assert evaluation["accuracy"] == summary["metrics"]["accuracy"]


def test_demo_runs_every_stage_and_says_what_it_did(demo):
    cwd, stdout = demo
    summary = json.loads(stdout.strip().splitlines()[-1])
    artifacts = {name: Path(path) for name, path in summary["artifacts"].items()}
    assert (artifacts["prepare-dataset/dataset"] / "manifest.json").is_file()
    assert (artifacts["build-trainer-image/build_context"] / "context" / "Dockerfile").is_file()
    assert (artifacts["build-trainer-image/build_context"] / "context.tar.gz").is_file()
    report = json.loads((artifacts["train-on-local-workers/training_job"] /
                         "training_report.json").read_text())
    assert report["num_workers"] == 2 and report["replicas_in_sync"] == 2
    curves = artifacts["report-training/curves"].read_text()
    assert curves.startswith("<!doctype html>") and curves.count("<svg") == 2
    assert "[gpu-pipeline] training: 10 epochs, multi_worker_mirrored on 2 training machine(s)" \
        in stdout
    for line in ("GPU configuration valid for us-central1",
                 "was not built or pushed (no Docker engine is used); training uses the "
                 "trainer installed in this environment",
                 "[trainer chief:0] model written to",
                 "Pipeline 'gpu-training-pipeline-local' finished with status SUCCESS"):
        assert line in stdout
    # Progress stays readable: KFP's executor input dumps are not shown.
    assert '"executorInput"' not in stdout and "inputDefinitions" not in stdout


def test_a_second_run_reuses_the_prepared_dataset(demo):
    cwd, stdout = demo
    first = json.loads(stdout.strip().splitlines()[-1])
    result = subprocess.run([str(BIN), "run", "--local", "--json", "--epochs", "1"], cwd=cwd,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    second = json.loads(result.stdout.strip().splitlines()[-1])
    assert second["dataset_reused"] and second["run_dir"] != first["run_dir"]
    assert second["artifacts"]["prepare-dataset/dataset"] == \
        first["artifacts"]["prepare-dataset/dataset"]
    assert "reused the dataset prepared earlier" in result.stdout
    assert "[gpu-pipeline] dataset: 4 classes" not in result.stdout  # not prepared again


def test_the_validation_stage_fails_the_run(tmp_path):
    # A configuration that skipped the CLI's pre-flight check: stage 2 must stop the run.
    config = Config()
    bad_pools = ({"machine_spec": {"machine_type": "n1-standard-4",
                                   "accelerator_type": "NVIDIA_TESLA_T4",
                                   "accelerator_count": 3}, "replica_count": 1},)
    config = config.model_copy(update={"vertex": config.vertex.model_copy(
        update={"worker_pool_specs": list(bad_pools)})})
    out = io.StringIO()
    with pytest.raises(LocalRunError, match="validate-gpu-config"):
        run_local(config, tmp_path, out=out)
    log = out.getvalue()
    assert "n1-standard-4 takes 1, 2, 4 x NVIDIA_TESLA_T4" in log
    # Validation runs first: nothing was prepared, built or trained.
    for stage in ("prepare-dataset", "build-trainer-image", "train-on-local-workers"):
        assert not list(tmp_path.rglob(stage)), stage


def test_a_dataset_the_stage_cannot_use_fails_the_run_with_its_message(tmp_path):
    # One class folder passes the config check (it is a directory) but not stage 1.
    from components.dataset.shapes import generate_shapes

    source = generate_shapes(tmp_path / "images", images_per_class=3, image_size=16, seed=1)
    for extra in ("cross", "square", "triangle"):
        for image in (source / extra).iterdir():
            image.unlink()
        (source / extra).rmdir()
    config = Config()
    config = config.model_copy(update={"dataset": config.dataset.model_copy(
        update={"source": str(source)})})
    out = io.StringIO()
    with pytest.raises(LocalRunError, match="fingerprint-dataset-source"):
        run_local(config, tmp_path / "runs", out=out)
    log = out.getvalue()
    assert "[gpu-pipeline] dataset: dataset source" in log and "has 1 class(es) (circle)" in log
    assert "Traceback" not in log and "executor_input" not in log
