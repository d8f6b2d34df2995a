"""`gpu-pipeline weights copy`: Keras' published weights, fetched and checked by Keras,
copied into a bucket (the Cloud Storage emulator on loopback), and a trainer whose network
is cut training from the copy. Keras' download is served by a stand-in (there is no
internet here): a real no-top weights file of the architecture, published with its own
MD5 in Keras' table, so that Keras' own hash check runs on it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
keras = pytest.importorskip("tf_keras")
from tf_keras.src.applications import mobilenet_v3  # noqa: E402
from tf_keras.src.utils import data_utils  # noqa: E402

from pipelines.cli import main  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402

# Exercised here without an import, through the CLI: `pipelines.commands.weights`,
# `trainer.models.weights_mirror`.

FILE = "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5"
ORIGIN = "https://storage.googleapis.com/tensorflow/keras-applications/mobilenet_v3/" + FILE


@pytest.fixture
def published(tmp_path, monkeypatch):
    """(the stand-in file, the URLs Keras downloaded) with an empty Keras cache."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".keras").mkdir()
    donor = keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                                input_shape=(32, 32, 3))
    file = tmp_path / "donor.h5"
    donor.save_weights(str(file))
    key = "small_224_1.0_float"
    monkeypatch.setitem(mobilenet_v3.WEIGHTS_HASHES, key, (
        mobilenet_v3.WEIGHTS_HASHES[key][0], hashlib.md5(file.read_bytes()).hexdigest()))
    fetched = []

    def download(url, path, progress=None):
        fetched.append(url)
        shutil.copyfile(file, path)

    monkeypatch.setattr(data_utils, "urlretrieve", download)
    return file, fetched


@pytest.mark.slow
def test_the_weights_are_checked_by_keras_and_copied_with_their_provenance(
        published, storage_emulator, capsys):
    from trainer.common.gcs import storage_client

    file, fetched = published
    storage_client().create_bucket("mirror")
    assert main(["weights", "copy", "--model", "mobilenet_v3_small",
                 "--to", "gs://mirror/keras/"]) == 0
    assert fetched == [ORIGIN]
    out = capsys.readouterr().out
    digest = hashlib.md5(file.read_bytes()).hexdigest()
    assert (f"mobilenet_v3_small: Keras fetched {FILE} ({file.stat().st_size:,} bytes) from "
            f"{ORIGIN} and checked it against its published md5 {digest}") in out
    assert out.endswith(f"training:\n  model: mobilenet_v3_small\n  weights: "
                        f"gs://mirror/keras/{FILE}\n")
    blob = storage_client().bucket("mirror").get_blob(f"keras/{FILE}")
    assert blob.download_as_bytes() == file.read_bytes()
    assert blob.metadata == {"keras-origin": ORIGIN, "keras-md5": digest,
                             "sha256": hashlib.sha256(file.read_bytes()).hexdigest()}


@pytest.mark.slow
def test_a_file_that_is_not_the_published_one_is_never_copied(published, storage_emulator,
                                                              monkeypatch, capsys):
    from trainer.common.gcs import storage_client

    storage_client().create_bucket("mirror")
    monkeypatch.setitem(mobilenet_v3.WEIGHTS_HASHES, "small_224_1.0_float", ("0" * 32,) * 2)
    assert main(["weights", "copy", "--model", "mobilenet_v3_small",
                 "--to", "gs://mirror/keras"]) == 2
    err = capsys.readouterr().err
    assert "file hash does not match" in err and "Traceback" not in err
    assert list(storage_client().bucket("mirror").list_blobs()) == []
    assert main(["weights", "copy", "--model", "cnn", "--to", "gs://mirror/keras"]) == 2
    assert "training.model is 'cnn', which has no published weights" in capsys.readouterr().err
    assert main(["weights", "copy", "--model", "resnet50", "--to", "/tmp/w"]) == 2


@pytest.mark.slow
def test_a_trainer_whose_network_is_cut_trains_from_the_copy(published, storage_emulator,
                                                             tmp_path, small_dataset):
    from trainer.common.gcs import storage_client

    file, _ = published
    storage_client().create_bucket("mirror")
    assert main(["weights", "copy", "--model", "mobilenet_v3_small",
                 "--to", "gs://mirror/keras"]) == 0
    data = small_dataset  # the weights are what this test is about: the least data
    offline = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests/support/offline"), str(ROOT)])}
    # The cut is real: the internet is out of reach, loopback (the bucket) is not.
    cut = subprocess.run([sys.executable, "-c", "import urllib.request; urllib.request."
                          f"urlopen('{ORIGIN}', timeout=5)"], env=offline,
                         capture_output=True, text=True)
    assert cut.returncode == 1 and "the network is cut" in cut.stderr
    trained = subprocess.run(
        [sys.executable, "-m", "trainer.task", "--job-dir", str(tmp_path / "job"),
         "--data-dir", str(data), "--model", "mobilenet_v3_small", "--epochs", "1",
         "--weights", f"gs://mirror/keras/{FILE}"], env=offline, capture_output=True,
        text=True, timeout=600)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    assert f"model: mobilenet_v3_small, weights gs://mirror/keras/{FILE}\n" in trained.stdout
    assert "epoch 1/1: loss" in trained.stdout
