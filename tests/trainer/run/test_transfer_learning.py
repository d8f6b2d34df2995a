"""Transfer learning on a real local cluster: a backbone from a weights file trains its head
(phase 1), then fine-tunes the top of its base (phase 2); a job whose worker is killed in
phase 2, restarted whole as Vertex AI restarts it, resumes there without repeating an epoch
and exports once, under MultiWorkerMirroredStrategy. (Both phases under
ParameterServerStrategy: tests/pipelines/vertex/test_emulated_layouts.py, on the Vertex AI
path.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.trainer_processes import EPOCH_LINE, finish, kill_after_epoch, start
from trainer.cluster.roles import Layout
from trainer.common.committed_dirs import MARKER, require_committed
from trainer.serving.container import METADATA_FILE

pytestmark = pytest.mark.slow
PHASE_1, PHASE_2 = 1, 2
WEIGHTS_SCRIPT = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tf_keras as keras
keras.utils.set_random_seed(3)
keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                    input_shape=(32, 32, 3)).save_weights(sys.argv[1])
"""


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory):
    """A weights file of MobileNetV3Small without its top, as a user would bring one."""
    path = tmp_path_factory.mktemp("weights") / "mobilenet_v3_small_notop.h5"
    subprocess.run([sys.executable, "-c", WEIGHTS_SCRIPT, str(path)], check=True,
                   capture_output=True)
    return path


def two_phase_args(job, data, weights, epochs=(PHASE_1, PHASE_2)):
    warmup = ["--warmup-epochs", "1"] if epochs[0] > 1 else []
    return ["--job-dir", str(job), "--data-dir", str(data), "--model", "mobilenet_v3_small",
            "--weights", str(weights), "--epochs", str(epochs[0]), "--fine-tune-epochs",
            str(epochs[1]), "--fine-tune-fraction", "0.5", "--batch-size", "8",
            "--cosine-decay", "--scale-learning-rate", *warmup]


def test_both_phases_survive_a_restart_in_phase_2_on_two_workers(small_dataset, tmp_path,
                                                                 weights_file):
    job = tmp_path / "job"
    args = two_phase_args(job, small_dataset, weights_file)
    # Killed once the first fine-tuning epoch is done.
    log, done_first = kill_after_epoch(*start(Layout(workers=1), args), PHASE_1 + 1, 400)
    assert "learning rate 0.006" in log  # 0.003 x 2 replicas: the linear scaling rule
    assert "fine-tuning: " in log and "learning rate 2e-05" in log
    assert done_first[:PHASE_1 + 1] == list(range(1, PHASE_1 + 2))
    assert max(done_first) < PHASE_1 + PHASE_2
    assert (job / "checkpoints" / "backup").is_dir()  # phase 1's, kept for a restart
    assert not (job / "model").exists()

    # Vertex AI restarts the whole job (restart_job_on_worker_restart): on new ports, the
    # same job dir, it resumes from the backup.
    logs = finish(start(Layout(workers=1), args))
    chief_log = logs[0]
    done = [int(n) for n, _ in EPOCH_LINE.findall(chief_log)]
    assert done and done[0] > max(done_first), (done_first, chief_log[-3000:])
    assert done == list(range(done[0], PHASE_1 + PHASE_2 + 1))  # phase 1 not run again
    assert f"resumed from the backup: epochs 1-{done[0] - 1} are done" in chief_log
    assert "fine-tuning: " in chief_log

    report = json.loads((job / "training_report.json").read_text())
    assert report["resumed_from_epoch"] == done[0] - 1
    assert [h["epoch"] for h in report["history"]] == list(range(PHASE_1 + PHASE_2))  # no gap
    assert report["epochs"] == PHASE_1 + PHASE_2 and report["model"] == "mobilenet_v3_small"
    assert [(p["name"], p["epochs"]) for p in report["phases"]] == [
        ("train", PHASE_1), ("fine_tune", PHASE_2)]
    assert not (job / "checkpoints" / "backup").exists()  # dropped after the last phase
    # Exported once, by the chief, and no other copy.
    model_dir = Path(require_committed(job / "model"))
    assert sum("model written to" in log for log in logs) == 1
    assert sorted(os.listdir(job / "model")) == sorted([MARKER, model_dir.name])
    metadata = json.loads((model_dir / METADATA_FILE).read_text())
    assert [p["name"] for p in metadata["training"]["phases"]] == ["train", "fine_tune"]
    # The chief measured the exported model through its serving signature before it
    # committed it (trainer.serving.measure): the model answers as a prediction client calls it.
    assert "exported model through its serving signature: validation accuracy" in chief_log
