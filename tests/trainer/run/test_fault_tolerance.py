"""Restarts and crashes: a killed worker resumes from the backup; a killed export leaves
the final location empty or complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.trainer_processes import EPOCH_LINE, finish, kill_after_epoch, start
from trainer.cluster.roles import Layout
from trainer.common.committed_dirs import MARKER, committed, require_committed

pytestmark = pytest.mark.slow
EPOCHS = 8


def test_killed_worker_then_restarted_cluster_resumes_without_repeating_epochs(
        small_dataset, tmp_path):
    job = tmp_path / "job"
    args = ["--job-dir", str(job), "--data-dir", str(small_dataset), "--epochs", str(EPOCHS),
            "--batch-size", "8"]

    # First attempt: kill a worker once the chief reports epoch 2 done, as a maintenance
    # event would; Vertex then restarts the whole job (restart_job_on_worker_restart).
    first_log, done_first = kill_after_epoch(*start(Layout(workers=1), args), 2, 300)
    assert done_first[:2] == [1, 2] and max(done_first) < EPOCHS, first_log
    assert not (job / "model").exists()

    # Second attempt on new ports, the same job dir: it resumes from the backup.
    logs = finish(start(Layout(workers=1), args))
    done_second = [int(n) for n, _ in EPOCH_LINE.findall(logs[0])]
    assert done_second and done_second[0] > max(done_first), (done_first, done_second)
    assert done_second == list(range(done_second[0], EPOCHS + 1))
    assert f"resumed from the backup: epochs 1-{done_second[0] - 1} are done" in logs[0]

    report = json.loads((job / "training_report.json").read_text())
    assert report["resumed_from_epoch"] == done_second[0] - 1
    assert [h["epoch"] for h in report["history"]] == list(range(EPOCHS))  # no gap, no repeat
    # Exported once, by the chief; the backup is gone now that training completed.
    assert (Path(require_committed(job / "model")) / "saved_model.pb").is_file()
    assert sum("model written to" in log for log in logs) == 1
    backup = job / "checkpoints" / "backup"
    assert not backup.exists() or not os.listdir(backup)
    assert sorted(os.listdir(job / "model")) == sorted(
        [MARKER, Path(committed(job / "model")).name])  # no other copy


EXPORT_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf, tf_keras as keras
    from trainer.serving.savedmodel import save_model
    from trainer.models.factory import build_model
    # resnet50 (~100 MB) is slow enough to be killed mid-write; cnn saves quickly.
    model = build_model(keras, sys.argv[2], 32, 4, 0.001)
    print("saving", flush=True)
    save_model(tf, model, sys.argv[1], is_chief=True, image_size=32, class_names="abcd")
    print("saved", flush=True)
""")


def test_crash_during_export_leaves_the_final_location_empty_or_complete(tmp_path):
    dest = tmp_path / "model"
    proc = subprocess.Popen([sys.executable, "-c", EXPORT_SCRIPT, str(dest), "resnet50"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.stdout.readline().strip() == "saving"
    # Kill it while the SavedModel is being written into its fresh directory.
    deadline = time.monotonic() + 120
    while not (dest.is_dir() and any(any(p.rglob("*")) for p in dest.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, "export ended too soon"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert committed(dest) is None, "readers must not find a partial model"
    assert not (dest / MARKER).exists()

    # A later export to the same place completes and clears the debris.
    rerun = subprocess.run([sys.executable, "-c", EXPORT_SCRIPT, str(dest), "cnn"],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    model = Path(require_committed(dest))
    assert sorted(os.listdir(dest)) == sorted([MARKER, model.name])
    assert {"saved_model.pb", "variables", "gpu_pipeline_model.json"} <= set(os.listdir(model))
    assert Path(model, "variables", "variables.index").is_file()
