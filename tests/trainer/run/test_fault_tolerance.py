"""Crashes: a killed export leaves the final location empty or complete. (A killed worker
resumes from the backup: test_transfer_learning, in phase 2 of two.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainer.common.committed_dirs import MARKER, committed, require_committed

pytestmark = pytest.mark.slow

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
