"""Dataset stage: every source, splits, shards, parallel encoding, bad input, fingerprints."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from components.dataset.encode import bounded_imap
from components.dataset.prepare import prepare_source
from components.dataset.shapes import generate_shapes
from components.dataset.sources import BUILTIN_SHAPES, DatasetError, source_fingerprint
from components.dataset.splits import shard_count, split_of
from tests.support import tfds_fixture
from tests.support.paths import ROOT
from trainer.common.contract import load_manifest, shard_paths


def make_folder(root, classes=("circle", "square"), per_class=6, size=24):
    """A small image folder (one sub-folder per class) drawn by the generator."""
    generate_shapes(root, images_per_class=per_class, image_size=size, seed=3)
    for extra in set(os.listdir(root)) - set(classes):
        shutil.rmtree(root / extra)
    return root


def records(dataset_dir, split, pixels=False):
    """(id, label, image shape) of each record of a split; the image itself with `pixels`."""
    import tensorflow as tf

    manifest = load_manifest(dataset_dir)
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64),
                "image/id": tf.io.FixedLenFeature([], tf.string)}
    out = []
    for record in tf.data.TFRecordDataset(shard_paths(dataset_dir, manifest, split)):
        example = tf.io.parse_single_example(record, features)
        image = tf.io.decode_png(example["image/encoded"], channels=3)
        out.append((example["image/id"].numpy().decode(), int(example["image/class/label"]),
                    image.numpy() if pixels else tuple(image.shape)))
    return out


def test_generated_shapes_are_deterministic(tmp_path):
    a = generate_shapes(tmp_path / "a", images_per_class=3, image_size=16, seed=1)
    b = generate_shapes(tmp_path / "b", images_per_class=3, image_size=16, seed=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*.png"))
    assert len(files) == 12 and sorted(p.relative_to(b) for p in b.rglob("*.png")) == files
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def test_builtin_shapes_are_drawn_once_and_equal_their_folder(tmp_path):
    """The stage draws the builtin images in its encoding processes, without TensorFlow;
    the shards are byte for byte those of the same images written as a folder."""
    code = ("import json, sys\n"
            "from components.dataset.prepare import prepare_source\n"
            f"m = prepare_source('builtin://shapes', {str(tmp_path / 'builtin')!r}, "
            "image_size=16, builtin_images_per_class=6, processes=2)\n"
            "assert 'tensorflow' not in sys.modules, 'the dataset stage imported TensorFlow'\n"
            "print(json.dumps(m['splits']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    drawn = json.loads(done.stdout)
    folder = generate_shapes(tmp_path / "folder", images_per_class=6, image_size=16)
    assert prepare_source(str(folder), tmp_path / "from-folder", image_size=16,
                           processes=1)["splits"] == drawn
    assert [r[0] for r in records(tmp_path / "builtin", "train")] == \
        [r[0] for r in records(tmp_path / "from-folder", "train")]


def test_manifest_shards_and_three_splits(small_dataset):
    manifest = load_manifest(small_dataset)
    assert manifest["classes"] == ["circle", "cross", "square", "triangle"]
    assert manifest["image_size"] == [32, 32, 3]
    splits = manifest["splits"]
    assert set(splits) == {"train", "validation", "test"}
    assert sum(s["count"] for s in splits.values()) == manifest["examples"] == 320
    for split in splits.values():
        assert len(split["shards"]) == 4
        assert sum(s["count"] for s in split["shards"]) == split["count"]
        assert sum(split["per_class"].values()) == split["count"]
        for shard in split["shards"]:
            data = (small_dataset / shard["file"]).read_bytes()
            assert len(data) == shard["bytes"]
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
    assert manifest["skipped"] == [] and manifest["source_kind"] == "builtin"
    listed = {s["file"] for split in splits.values() for s in split["shards"]}
    assert set(os.listdir(small_dataset)) == listed | {"manifest.json", "report.md"}


def test_records_decode_to_labelled_images_of_their_split(small_dataset):
    manifest = load_manifest(small_dataset)
    for split in ("validation", "test"):
        seen = records(small_dataset, split)
        assert len(seen) == len({i for i, _, _ in seen}) == manifest["splits"][split]["count"]
        for identity, label, shape in seen:
            assert shape == (32, 32, 3)
            assert identity.startswith(manifest["classes"][label] + "/")
            assert split_of(identity, 0.25, 0.1) == split


def test_split_is_stable_when_images_are_added():
    ids = [f"cls/{i}.png" for i in range(3000)]
    before = {i: split_of(i, 0.2, 0.1) for i in ids}
    more = ids + [f"cls/new{i}.png" for i in range(1000)]
    assert all(split_of(i, 0.2, 0.1) == before[i] for i in ids)
    shares = {s: sum(split_of(i, 0.2, 0.1) == s for i in more) / len(more)
              for s in ("train", "validation", "test")}
    assert abs(shares["validation"] - 0.2) < 0.03 and abs(shares["test"] - 0.1) < 0.03


@pytest.mark.parametrize("examples,size_mb,workers,expected", [
    (100, 1, 2, 2), (100, 1, 3, 3), (5, 1, 8, 5),
    (10**6, 1000, 2, 8), (10**6, 1000, 3, 9), (10**6, 151, 1, 2),
])
def test_shard_plan(examples, size_mb, workers, expected):
    assert shard_count(examples, size_mb * 2**20, workers) == expected


@pytest.mark.slow
def test_decoding_pool_reads_at_most_a_window_ahead_of_the_writer():
    """Memory stays bounded when writing is slower than decoding."""
    import multiprocessing
    import time

    pulled = 0

    def inputs(n):
        nonlocal pulled
        for i in range(n):
            pulled += 1
            yield i

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        leads, results = [], []
        for consumed, value in enumerate(bounded_imap(pool, abs, inputs(400), window=40,
                                                      chunksize=8), start=1):
            time.sleep(0.002 if consumed > 5 else 0.2)  # a slow writer; nothing more is sent
            leads.append(pulled - consumed)
            results.append(value)
        assert results == list(range(400))
        assert max(leads) <= 40 and max(leads) >= 30  # it does read ahead, up to the window
        started = time.monotonic()
        for _ in bounded_imap(pool, abs, inputs(10**9), window=40, chunksize=8):
            break  # a consumer that stops early (an error) must not leave the pool stuck
    assert time.monotonic() - started < 30


def test_folder_source_parallel_equals_serial(tmp_path):
    src = make_folder(tmp_path / "src", per_class=12)
    serial = prepare_source(str(src), tmp_path / "serial", image_size=16, processes=1,
                             validation_fraction=0.25, input_pipelines=2)
    parallel = prepare_source(str(src), tmp_path / "parallel", image_size=16, processes=2,
                               validation_fraction=0.25, input_pipelines=2)
    assert serial["classes"] == ["circle", "square"] and serial["source_kind"] == "folder"
    assert serial["splits"] == parallel["splits"]  # same shards, byte for byte
    assert len(serial["splits"]["train"]["shards"]) == 2
    assert serial["source_fingerprint"] == source_fingerprint(str(src))


def test_csv_and_jsonl_manifests(tmp_path):
    src = make_folder(tmp_path / "src", per_class=6)
    files = sorted(p for p in src.rglob("*.png"))
    csv_path = tmp_path / "src" / "labels.csv"
    csv_path.write_text("image,label\n" + "".join(
        f"{p.relative_to(src)},{'round' if 'circle' in p.name else 'boxy'}\n" for p in files))
    # Paths relative to the file: an example's split follows from its path, which would
    # otherwise change with the test's temporary directory (1 in about 30 left the
    # validation split of these 12 images empty).
    jsonl_path = tmp_path / "labels.jsonl"
    jsonl_path.write_text("".join(json.dumps({"image": str(p.relative_to(tmp_path)),
                                              "label": p.parent.name}) + "\n" for p in files))
    from_csv = prepare_source(str(csv_path), tmp_path / "csv", image_size=16,
                              validation_fraction=0.3, test_fraction=0.0)
    from_jsonl = prepare_source(str(jsonl_path), tmp_path / "jsonl", image_size=16,
                                validation_fraction=0.3, test_fraction=0.0)
    assert from_csv["classes"] == ["boxy", "round"]
    assert from_jsonl["classes"] == ["circle", "square"]
    for manifest in (from_csv, from_jsonl):
        assert manifest["source_kind"] == "manifest" and manifest["examples"] == 12


def test_a_manifest_with_relative_paths_keeps_its_splits_where_it_moves(tmp_path):
    """An image's split follows from its path as the manifest writes it, as a folder's
    follows from its path under the folder: moving both changes no split."""
    from components.dataset.sources.manifest import Manifest
    from components.dataset.splits import split_of

    splits = []
    for place in ("here", "there/deeper"):
        src = make_folder(tmp_path / place / "src", per_class=6)
        manifest = tmp_path / place / "labels.csv"
        manifest.write_text("image,label\n" + "".join(
            f"{p.relative_to(manifest.parent)},{p.parent.name}\n"
            for p in sorted(src.rglob("*.png"))))
        listing = Manifest.listing(str(manifest), image_size=16, per_class=0)
        assert all(os.path.isabs(ex.ref) for ex in listing.examples)  # read from there
        splits.append([(ex.identity, split_of(ex.identity, 0.3)) for ex in listing.examples])
    assert splits[0] == splits[1] and splits[0][0][0].startswith("src/")


def test_manifest_errors(tmp_path):
    src = make_folder(tmp_path / "src", per_class=2)
    image = next(src.rglob("*.png"))
    bad = tmp_path / "bad.csv"
    bad.write_text(f"image,label\n{image},a\n{image},\n,b\n")
    with pytest.raises(DatasetError, match=r"2 unusable row\(s\): .*bad.csv:3: image .* has no "
                                           r"label; .*bad.csv:4: no image URI"):
        prepare_source(str(bad), tmp_path / "out")
    header = tmp_path / "header.csv"
    header.write_text("path,class\nx.png,a\n")
    with pytest.raises(DatasetError, match="lacks the column"):
        prepare_source(str(header), tmp_path / "out")
    with pytest.raises(DatasetError, match="does not exist"):
        prepare_source(str(tmp_path / "missing.jsonl"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("setup,message", [
    (lambda root: None, "is not a directory"),
    (lambda root: make_folder(root, ["circle"]), r"has 1 class\(es\) \(circle\)"),
    (lambda root: (make_folder(root), (root / "empty").mkdir()), "holds no image"),
    (lambda root: (make_folder(root), (root / "circle" / "notes.txt").write_text("x")),
     r"holds 1 file\(s\) of unknown type \(circle/notes.txt\)"),
])
def test_bad_sources(tmp_path, setup, message):
    setup(tmp_path / "src")
    with pytest.raises(DatasetError, match=message):
        prepare_source(str(tmp_path / "src"), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".dataset-")] == []


def test_bad_parameters_and_nonempty_output(tmp_path):
    with pytest.raises(DatasetError, match="validation_fraction is 1.0"):
        prepare_source(BUILTIN_SHAPES, tmp_path / "a", validation_fraction=1.0)
    with pytest.raises(DatasetError, match="test_fraction is 0.5"):
        prepare_source(BUILTIN_SHAPES, tmp_path / "a", validation_fraction=0.5,
                        test_fraction=0.5)
    with pytest.raises(DatasetError,
                       match="dataset.source is .s3:..bucket.data.; the scheme s3:.. is not read"):
        prepare_source("s3://bucket/data", tmp_path / "a")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    with pytest.raises(DatasetError, match="is not empty"):
        prepare_source(BUILTIN_SHAPES, tmp_path / "full")
    assert os.listdir(tmp_path / "full") == ["keep.txt"]


def _corrupt(src):
    """Two bad images: a truncated PNG and a file that is not an image at all."""
    good = next((src / "square").glob("*.png")).read_bytes()
    (src / "square" / "truncated.png").write_bytes(good[: len(good) // 2])
    (src / "circle" / "garbage.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")


def test_undecodable_images_are_skipped_counted_and_reported(tmp_path):
    src = make_folder(tmp_path / "src", per_class=40)
    _corrupt(src)
    report = tmp_path / "report.md"
    manifest = prepare_source(str(src), tmp_path / "out", image_size=16,
                               max_bad_fraction=0.05, report_path=report)
    skipped = {os.path.basename(s["file"]): s["reason"] for s in manifest["skipped"]}
    assert set(skipped) == {"truncated.png", "garbage.jpg"}
    assert all(r.startswith("cannot decode") for r in skipped.values())
    assert manifest["examples"] == 82 and abs(manifest["bad_fraction"] - 2 / 82) < 1e-9
    assert sum(s["count"] for s in manifest["splits"].values()) == 80
    text = report.read_text()
    assert "## Skipped files: 2" in text and "truncated.png" in text and "| circle |" in text
    assert (tmp_path / "out" / "report.md").read_text() == text


def test_too_many_bad_images_fail_and_leave_nothing(tmp_path):
    src = make_folder(tmp_path / "src", per_class=10)
    _corrupt(src)
    with pytest.raises(DatasetError, match=r"2 of 22 images \(9.1%\) could not be decoded, "
                                           r"above max_bad_fraction 1.0%"):
        prepare_source(str(src), tmp_path / "out", image_size=16, max_bad_fraction=0.01)
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_fingerprint_follows_the_source(tmp_path):
    src = make_folder(tmp_path / "src", per_class=3)
    first = source_fingerprint(str(src))
    assert source_fingerprint(str(src)) == first
    (src / "circle" / "extra.png").write_bytes(next(src.rglob("*.png")).read_bytes())
    second = source_fingerprint(str(src))
    assert second != first
    os.utime(src / "circle" / "extra.png", ns=(1, 1))  # same name and size, other content time
    assert source_fingerprint(str(src)) not in (first, second)
    assert source_fingerprint(BUILTIN_SHAPES, 32) != source_fingerprint(BUILTIN_SHAPES, 64)


def test_tfds_source_without_the_extra_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails as if absent
    with pytest.raises(DatasetError, match=r"needs tensorflow-datasets: install the project "
                                           r"with the \[tfds\] extra"):
        prepare_source("tfds://mnist", tmp_path / "out")


@pytest.mark.slow
def test_tfds_source_prepared_on_disk(tmp_path):
    """A TFDS dataset already on disk (TFDS_DATA_DIR), read in a fresh process that does
    not know its builder code, as the KFP component would; nothing is downloaded."""
    data_dir, out = tmp_path / "tfds", tmp_path / "out"
    env = {**os.environ, "TFDS_DATA_DIR": str(data_dir), "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "tfds_fixture.py"),
                    str(data_dir)], check=True, capture_output=True, timeout=300)
    prepare = ("import sys; from components.dataset.prepare import prepare_source; "
               "prepare_source(sys.argv[1], sys.argv[2], image_size=8, "
               "validation_fraction=0.25, test_fraction=0.0)")
    for source, target in ((f"tfds://{tfds_fixture.NAME}", out),
                           (f"tfds://{tfds_fixture.NAME}/test", tmp_path / "test-split"),
                           ("tfds://gp_not_on_disk", tmp_path / "missing")):
        result = subprocess.run([sys.executable, "-c", prepare, source, str(target)], env=env,
                                capture_output=True, text=True, timeout=300)
        assert (result.returncode == 0) == ("not_on_disk" not in source), result.stderr[-2000:]
    assert "TFDS dataset 'gp_not_on_disk' cannot be used" in result.stderr
    assert not (tmp_path / "missing").exists()

    manifest = load_manifest(out)
    assert manifest["classes"] == tfds_fixture.CLASSES and manifest["source_kind"] == "tfds"
    assert manifest["examples"] == tfds_fixture.SPLITS["train"]
    assert manifest["source_fingerprint"] == f"tfds:{tfds_fixture.NAME}:1.0.0:train:20"
    assert load_manifest(tmp_path / "test-split")["examples"] == tfds_fixture.SPLITS["test"]
    seen = []
    for split in ("train", "validation"):
        for identity, label, image in records(out, split, pixels=True):
            index = int(identity.rsplit("/", 1)[1])
            assert identity == f"{tfds_fixture.NAME}/train/{index}"
            assert split_of(identity, 0.25, 0.0) == split
            assert image.shape == (8, 8, 3)
            assert (image == tfds_fixture.tone(label)).all()  # TFDS's label, with its image
            seen.append(index)
    assert sorted(seen) == list(range(20))


# --- Cloud Storage (gcp-storage-emulator on loopback) -----------------------------------------


@pytest.fixture
def bucket(storage_emulator):
    from trainer.common.gcs import storage_client

    return storage_client().create_bucket("images")


@pytest.mark.slow
def test_gcs_folder_source(tmp_path, bucket):
    src = make_folder(tmp_path / "src", per_class=8)
    for path in sorted(src.rglob("*.png")):
        bucket.blob(f"data/{path.relative_to(src)}").upload_from_filename(str(path))
    bucket.blob("data/.hidden/skip.png").upload_from_string(b"x")
    gcs = prepare_source("gs://images/data", tmp_path / "gcs", image_size=16, processes=2,
                          validation_fraction=0.25)
    local = prepare_source(str(src), tmp_path / "local", image_size=16,
                            validation_fraction=0.25)
    assert gcs["source_kind"] == "gcs-folder" and gcs["classes"] == local["classes"]
    # Same identities (paths under the prefix), so the same split and the same bytes.
    assert gcs["splits"] == local["splits"]
    fingerprint = source_fingerprint("gs://images/data")
    bucket.blob("data/circle/new.png").upload_from_filename(str(next(src.rglob("*.png"))))
    assert source_fingerprint("gs://images/data") != fingerprint


@pytest.mark.slow
def test_gcs_manifest_and_missing_objects(tmp_path, bucket):
    src = make_folder(tmp_path / "src", per_class=10)
    lines = []
    for path in sorted(src.rglob("*.png")):
        bucket.blob(f"img/{path.name}").upload_from_filename(str(path))
        lines.append(json.dumps({"image": f"gs://images/img/{path.name}",
                                 "label": path.parent.name}))
    lines.append(json.dumps({"image": "gs://images/img/gone.png", "label": "circle"}))
    bucket.blob("labels.jsonl").upload_from_string("\n".join(lines))
    manifest = prepare_source("gs://images/labels.jsonl", tmp_path / "out", image_size=16,
                               validation_fraction=0.3, max_bad_fraction=0.1)
    assert manifest["examples"] == 21 and manifest["classes"] == ["circle", "square"]
    assert manifest["skipped"] == [{"file": "gs://images/img/gone.png",
                                    "reason": "missing file"}]
    with pytest.raises(DatasetError, match="holds no objects"):
        prepare_source("gs://images/nothing-here", tmp_path / "none")


PREPARE_SCRIPT = """
import sys
from components.dataset.prepare import prepare_source
from trainer.common.errors import ProjectError

# Exercised here without an import, through `prepare_source`/`prepare_dataset`:
# `components.dataset.local_engine`, `components.dataset.written_shards`,
# `components.dataset.dataset_report`.
if __name__ == "__main__":
    try:
        prepare_source(sys.argv[1], sys.argv[2], image_size=32, processes=2)
    except ProjectError as exc:
        print(f"stage error: {exc}", file=sys.stderr)
        sys.exit(1)
    print("prepared")
"""


def _big_image_folder(root, copies=150):
    """Two classes of large PNGs: decoding takes long enough to be interrupted (about
    70 ms an image here). Gradients, so that the files are small (17 KB each, where
    noise of the same decoding time would write about 1 GB for the whole folder)."""
    from PIL import Image

    ramp = Image.linear_gradient("L").resize((2048, 2048))
    picture = Image.merge("RGB", (ramp, ramp.transpose(Image.Transpose.ROTATE_90),
                                  ramp.transpose(Image.Transpose.FLIP_TOP_BOTTOM)))
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        picture.save(root / label / "0.png")
        for i in range(1, copies):
            shutil.copyfile(root / label / "0.png", root / label / f"{i}.png")
    return root


def _children(pid):
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append((int(entry.name), cmdline))
    return found


@pytest.mark.slow
def test_a_killed_decoding_process_fails_the_stage_instead_of_hanging(tmp_path):
    import signal
    import time

    source = _big_image_folder(tmp_path / "images")
    script = tmp_path / "prepare.py"
    script.write_text(PREPARE_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(source), str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    workers = []
    while not workers:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        workers = [pid for pid, cmd in _children(proc.pid) if "spawn_main" in cmd]
        time.sleep(0.05)
    time.sleep(1.0)  # decoding is under way
    os.kill(workers[0], signal.SIGKILL)  # as the kernel's OOM killer would
    out, err = proc.communicate(timeout=120)  # fails; never hangs
    assert proc.returncode == 1, (out, err)
    assert "stage error: a decoding process died" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing half-written is left


def test_a_program_read_from_standard_input_fails_clearly(tmp_path):
    # Under the spawn start method every worker re-imports the main program, which code
    # read from standard input cannot be: the workers die at start.
    source = make_folder(tmp_path / "src", per_class=12)
    proc = subprocess.run([sys.executable, "-", str(source), str(tmp_path / "out")],
                          input=PREPARE_SCRIPT, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stage error: a decoding process died" in proc.stderr
    assert "run the program from a file" in proc.stderr


def test_image_format_auto_jpeg_for_photos_png_for_small_or_builtin():
    from components.dataset.dataset_options import stored_format

    assert stored_format("auto", "/data/photos", 224) == "jpeg"
    assert stored_format("auto", "/data/photos", 32) == "png"
    assert stored_format("auto", BUILTIN_SHAPES, 224) == "png"
    assert stored_format("png", "/data/photos", 224) == "png"
    assert stored_format("jpeg", BUILTIN_SHAPES, 32) == "jpeg"


def test_jpeg_shards_decode_close_to_the_png_ones_and_are_smaller(tmp_path):
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    src = tmp_path / "src"
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (src / label).mkdir(parents=True)
        for i in range(8):  # smooth photo-like fields with fine noise
            coarse = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
            field = np.asarray(Image.fromarray(coarse).resize((120, 90), Image.BICUBIC), float)
            field = np.clip(field + rng.normal(0, 8, field.shape), 0, 255).astype(np.uint8)
            Image.fromarray(field).save(src / label / f"{i}.jpg", quality=92)
    jpeg = prepare_source(str(src), tmp_path / "jpeg", image_size=64, validation_fraction=0.25)
    png = prepare_source(str(src), tmp_path / "png", image_size=64, validation_fraction=0.25,
                          image_format="png")
    assert jpeg["image_format"] == "jpeg" and png["image_format"] == "png"
    assert "RGB JPEG" in (tmp_path / "jpeg" / "report.md").read_text()
    size = {m["image_format"]: sum(s["bytes"] for sp in m["splits"].values()
                                   for s in sp["shards"]) for m in (jpeg, png)}
    assert size["jpeg"] < size["png"] / 2

    def pixels(directory, decode):
        out = {}
        for record in tf.data.TFRecordDataset(shard_paths(directory, load_manifest(directory),
                                                          "train")):
            example = tf.io.parse_single_example(record, {
                "image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/id": tf.io.FixedLenFeature([], tf.string)})
            out[example["image/id"].numpy()] = decode(example["image/encoded"],
                                                      channels=3).numpy().astype(float)
        return out

    lossy, lossless = pixels(tmp_path / "jpeg", tf.io.decode_jpeg), pixels(tmp_path / "png",
                                                                        tf.io.decode_png)
    assert lossy.keys() == lossless.keys()
    for key, image in lossless.items():
        assert image.shape == (64, 64, 3)
        assert np.abs(lossy[key] - image).mean() < 4  # quality 95: close to lossless


def test_bad_image_format_names_the_field(tmp_path):
    with pytest.raises(DatasetError,
                       match=r"dataset.image_format is 'webp'; expected one of auto, png, jpeg"):
        prepare_source(BUILTIN_SHAPES, tmp_path / "out", image_format="webp")
    assert not (tmp_path / "out").exists()


def test_a_long_preparation_says_how_far_it_is_its_rate_and_the_time_left():
    from components.progress import Progress

    now = [0.0]
    lines: list[str] = []
    progress = Progress("dataset: images encoded", 10_000, every=15, log=lines.append,
                        clock=lambda: now[0])
    for _ in range(100):  # 100 images a second for 10 s: too soon to say anything
        now[0] += 0.1
        progress.advance(10)
    assert lines == []
    now[0] = 15.0
    progress.advance(500)  # 1,500 of 10,000 after 15 s: 100/s, 85 s left
    assert lines == ["dataset: images encoded: 1500 of 10000 (15%), 100/s, about 85 s left"]
    now[0] += 1.0
    progress.advance(10)  # within `every` of the last report: quiet
    now[0] += 30.0
    progress.advance(8490)  # done: the stage's own summary says the rest
    assert len(lines) == 1
