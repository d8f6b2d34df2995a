"""Real multi-worker training: 2 processes on localhost, TF_CONFIG in Vertex's format."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest

from components.export.saved_models import ExportError, model_metrics, publish_model
from components.training.local_cluster import LocalTrainingError, run_local_cluster
from trainer.cluster.roles import Layout
from trainer.common.committed_dirs import MARKER, committed, require_committed

# Exercised here without an import, in the `python -m trainer.task` processes: `trainer.task`,
# `trainer.run.callbacks` (epoch checkpoints, backups), `trainer.serving.savedmodel` (the
# chief's export).

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(small_dataset, tmp_path_factory):
    """Trains once with a chief and 2 workers; returns (job_dir, model_dir, temp root, log)."""
    root = tmp_path_factory.mktemp("train")
    temp_root = root / "tmp"
    temp_root.mkdir()
    log = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(temp_root))  # where non-chief workers save their copies
        run_local_cluster(Layout(workers=2), [
            "--job-dir", str(root / "job"), "--data-dir", str(small_dataset),
            "--model-dir", str(root / "model"), "--epochs", "4", "--batch-size", "8"],
            timeout_seconds=600, out=log)
    return root / "job", Path(require_committed(root / "model")), temp_root, log.getvalue()


def test_chief_and_two_workers_train_in_sync(trained):
    job_dir, model_dir, temp_root, log = trained
    report = json.loads((job_dir / "training_report.json").read_text())
    assert report["num_workers"] == 3 and report["replicas_in_sync"] == 3
    assert report["global_batch_size"] == 24 and report["per_replica_batch_size"] == 8
    assert report["task"] == "chief:0" and report["resumed_from_epoch"] == 0
    losses = [h["loss"] for h in report["history"]]
    assert len(losses) == 4 and losses[-1] < losses[0]
    # All three trained, and their weights are identical: gradients were all-reduced.
    digests = dict(re.findall(r"\[trainer (chief:0|worker:[01])\] trained .* digest "
                              r"([0-9a-f]{64})", log))
    assert set(digests) == {"chief:0", "worker:0", "worker:1"}, log[-2000:]
    assert set(digests.values()) == {report["weights_sha256"]}
    # Each worker reads its own shards, yet all log the same epoch metrics: the epoch logs
    # are the cluster's, although each step's logs stay on its worker (trainer.run.step_logs).
    epochs = {task: re.findall(rf"\[trainer {re.escape(task)}\] (epoch \d+/4: .*)", log)
              for task in ("chief:0", "worker:0", "worker:1")}
    assert len(epochs["chief:0"]) == 4 and \
        epochs["chief:0"] == epochs["worker:0"] == epochs["worker:1"], epochs


def test_every_validation_image_counts_in_every_epoch(trained, small_dataset, tmp_path):
    """Each epoch's validation metrics are computed on the whole split, on three machines
    as on one: the count of images they saw equals the split's size (not the whole global
    batches of 24 it holds)."""
    from trainer.common.contract import load_manifest

    job_dir, _, _, log = trained
    count = load_manifest(small_dataset)["splits"]["validation"]["count"]
    assert count % 24  # a partial last batch: dropping it would show
    report = json.loads((job_dir / "training_report.json").read_text())
    assert [h["val_examples"] for h in report["history"]] == [count] * 4
    assert f"on {count} validation images" in log
    one = tmp_path / "one-machine"
    out = io.StringIO()
    run_local_cluster(Layout(workers=0), [
        "--job-dir", str(one / "job"), "--data-dir", str(small_dataset),
        "--model-dir", str(one / "model"), "--epochs", "1", "--batch-size", "8"],
        timeout_seconds=600, out=out)
    alone = json.loads((one / "job" / "training_report.json").read_text())
    assert [h["val_examples"] for h in alone["history"]] == [count]


def test_only_the_chief_keeps_a_model_and_no_temporary_directory_is_left(trained):
    job_dir, model_dir, temp_root, log = trained
    assert (model_dir / "saved_model.pb").is_file()
    metadata = json.loads((model_dir / "gpu_pipeline_model.json").read_text())
    assert metadata["class_names"] == ["circle", "cross", "square", "triangle"]
    assert metadata["training"]["num_workers"] == 3
    assert os.listdir(temp_root) == []  # the workers' temporary copies were removed
    assert sorted(os.listdir(model_dir.parent.parent)) == ["job", "model", "tmp"]
    assert sorted(os.listdir(model_dir.parent)) == sorted([MARKER, model_dir.name])
    assert not (job_dir / "model").exists()  # nobody wrote a second copy
    assert log.count("model written to") == 1 and "[trainer chief:0] model written to" in log


def test_reports_checkpoints_and_cleaned_backup(trained):
    job_dir, _, _, _ = trained
    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert metrics["epochs_completed"] == 4 and 0 <= metrics["val_accuracy"] <= 1
    history = json.loads((job_dir / "training_report.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [0, 1, 2, 3]
    events = [f for _, _, files in os.walk(job_dir / "tensorboard") for f in files]
    assert any(f.startswith("events.out.tfevents") for f in events)
    checkpoints = job_dir / "checkpoints"
    # Per-epoch weights for a sidecar evaluator (the last 3 kept), and the plan it reads.
    kept = sorted(p.name for p in (checkpoints / "epochs").glob("ckpt-*.index"))
    assert kept == ["ckpt-2.index", "ckpt-3.index", "ckpt-4.index"]
    plan = json.loads((checkpoints / "epochs" / "plan.json").read_text())
    assert plan["epochs"] == 4 and plan["steps_per_epoch"] > 0
    # BackupAndRestore removes its backup once training completes.
    assert not (checkpoints / "backup").exists() or not os.listdir(checkpoints / "backup")


def test_saved_model_serves_bytes_and_floats(trained, small_dataset):
    import numpy as np
    import tensorflow as tf

    _, model_dir, _, _ = trained
    loaded = tf.saved_model.load(str(model_dir))
    assert set(loaded.signatures) == {"serving_default", "serving_images"}
    png = tf.io.encode_png(tf.zeros([32, 32, 3], tf.uint8))
    by_bytes = loaded.signatures["serving_default"](image_bytes=tf.stack([png, png]))
    by_floats = loaded.signatures["serving_images"](images=tf.zeros([2, 32, 32, 3]))
    assert by_bytes["probabilities"].shape == (2, 4)
    np.testing.assert_allclose(by_bytes["probabilities"], by_floats["probabilities"], atol=1e-5)
    assert by_bytes["class_name"].numpy()[0].decode() in {"circle", "cross", "square", "triangle"}
    # The signatures and the variables, without the Keras model's own objects (whose every
    # layer's call functions made a save and a load several times slower).
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel.FromString((model_dir / "saved_model.pb").read_bytes())
    kinds = {node.user_object.identifier for node in saved.meta_graphs[0].object_graph_def.nodes
             if node.WhichOneof("kind") == "user_object"}
    assert not {kind for kind in kinds if "keras" in kind}, kinds


def test_the_trainer_measures_its_model_and_export_reuses_it(trained, small_dataset,
                                                             tmp_path):
    import shutil

    import tensorflow as tf

    from trainer.common.contract import load_manifest
    from trainer.serving import measure

    _, model_dir, _, log = trained
    manifest = load_manifest(small_dataset)
    committed_with_model = json.loads((model_dir / "evaluation.json").read_text())
    assert committed_with_model["dataset"] == measure.dataset_digest(manifest)
    metrics = committed_with_model["metrics"]
    assert "[trainer chief:0] exported model through its serving signature: validation " \
        f"accuracy {metrics['accuracy']:.4f} on {metrics['examples']} examples" in log
    # The same figures as an evaluation of the committed model from scratch.
    again = measure.evaluate(tf, model_dir, small_dataset, manifest)
    assert again["metrics"] == metrics
    # The held-out split's confusion matrix: rows are true classes, each row sums to the
    # class's images, the diagonal to the correct ones.
    confusion = committed_with_model["confusion"]
    assert again["confusion"] == confusion == measure.confusion(model_dir, manifest)
    held_out = manifest["splits"][confusion["split"]]["per_class"]
    assert [sum(row) for row in confusion["matrix"]] == [held_out[c] for c in manifest["classes"]]
    accuracy = metrics["test_accuracy"] if confusion["split"] == "test" else metrics["accuracy"]
    diagonal = sum(confusion["matrix"][i][i] for i in range(len(manifest["classes"])))
    assert diagonal == round(accuracy * sum(held_out.values()))
    # Each held-out image right or wrong, in file order, for the gate's paired test: as
    # many as the split holds, as many right as the diagonal.
    correct = committed_with_model["correct"]
    assert again["correct"] == correct and correct["split"] == confusion["split"]
    assert len(correct["images"]) == sum(held_out.values())
    assert correct["images"].count("1") == diagonal
    assert measure.correctness(model_dir, manifest) == correct["images"]
    assert metrics["examples"] == manifest["splits"]["validation"]["count"]
    assert metrics["test_examples"] == manifest["splits"]["test"]["count"]
    assert {"accuracy_circle", "accuracy_cross", "accuracy_square", "accuracy_triangle"} <= \
        set(metrics)
    assert model_metrics(model_dir.parent, small_dataset) == (metrics, True)
    # Measured on other data (here: a validation shard changed), the model is evaluated
    # again by the export stage.
    other = tmp_path / "other-data"
    shutil.copytree(small_dataset, other)
    changed = json.loads((other / "manifest.json").read_text())
    changed["splits"]["validation"]["shards"][0]["sha256"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(changed))
    assert model_metrics(model_dir, other) == (metrics, False)

    exported = Path(publish_model(model_dir.parent, tmp_path / "exported", metrics,
                                  small_dataset))
    assert exported == Path(require_committed(tmp_path / "exported"))
    assert (exported / "saved_model.pb").is_file()
    assert json.loads((exported / "evaluation.json").read_text()) == committed_with_model
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ExportError, match="no SavedModel and no committed one"):
        model_metrics(tmp_path / "taken", small_dataset)
    with pytest.raises(ExportError, match="no SavedModel"):
        publish_model(tmp_path / "taken", tmp_path / "other", metrics, small_dataset)
    assert not (tmp_path / "other").exists() or committed(tmp_path / "other") is None


def test_a_failing_worker_stops_the_cluster(small_dataset, tmp_path):
    with pytest.raises(LocalTrainingError, match="exited with code 2"):
        run_local_cluster(Layout(workers=1), [
            "--job-dir", str(tmp_path), "--data-dir", str(small_dataset), "--epochs", "0"],
            timeout_seconds=120, out=io.StringIO())
