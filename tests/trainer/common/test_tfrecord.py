"""TFRecords written without TensorFlow, read back by TensorFlow's own reader and parser."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainer.common import contract, tfrecord


def _read(path):
    import tensorflow as tf

    return [r.numpy() for r in tf.data.TFRecordDataset(str(path))]


def test_records_read_back_by_tensorflow_byte_for_byte(tmp_path):
    records = [b"", b"x", bytes(range(256)) * 300]  # empty, tiny, and a multi-byte length
    with tfrecord.Writer(tmp_path / "a.tfrecord") as writer:
        for record in records:
            writer.write(record)
    assert _read(tmp_path / "a.tfrecord") == records


def test_same_file_as_tensorflows_writer(tmp_path):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for record in (b"abc", b"\x00" * 1000):
            writer.write(record)
    with tfrecord.Writer(tmp_path / "ours.tfrecord") as writer:
        for record in (b"abc", b"\x00" * 1000):
            writer.write(record)
    assert (tmp_path / "ours.tfrecord").read_bytes() == (tmp_path / "tf.tfrecord").read_bytes()


def test_a_corrupted_record_fails_tensorflows_checksum(tmp_path):
    import tensorflow as tf

    path = tmp_path / "a.tfrecord"
    with tfrecord.Writer(path) as writer:
        writer.write(b"hello world")
    data = bytearray(path.read_bytes())
    data[14] ^= 0xFF  # inside the record's data
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        _read(path)


@pytest.mark.parametrize("label", [0, 3, 127, 128, 300, 2**40, -1, -(2**63)])
def test_examples_parse_as_tensorflows(label):
    import tensorflow as tf

    image = bytes(range(200))
    serialized = contract.serialize_example(image, label, "circle/0001.png")
    parsed = tf.io.parse_single_example(serialized, {
        contract.FEATURE_IMAGE: tf.io.FixedLenFeature([], tf.string),
        contract.FEATURE_LABEL: tf.io.FixedLenFeature([], tf.int64),
        contract.FEATURE_ID: tf.io.FixedLenFeature([], tf.string)})
    assert parsed[contract.FEATURE_IMAGE].numpy() == image
    assert parsed[contract.FEATURE_LABEL].numpy() == label
    assert parsed[contract.FEATURE_ID].numpy() == b"circle/0001.png"
    expected = tf.train.Example(features=tf.train.Features(feature={
        contract.FEATURE_IMAGE: tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        contract.FEATURE_LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        contract.FEATURE_ID: tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[b"circle/0001.png"]))}))
    assert tf.train.Example.FromString(serialized) == expected


def test_lists_of_values_and_bad_values():
    import tensorflow as tf

    parsed = tf.train.Example.FromString(tfrecord.example({"b": [b"1", b"22"], "i": [1, -2, 3],
                                                           "empty": []}))
    assert list(parsed.features.feature["b"].bytes_list.value) == [b"1", b"22"]
    assert list(parsed.features.feature["i"].int64_list.value) == [1, -2, 3]
    with pytest.raises(TypeError, match="all bytes or all ints"):
        tfrecord.example({"mixed": [b"1", 2]})


def test_writing_does_not_import_tensorflow(tmp_path):
    code = ("import sys; from trainer.common import contract, tfrecord\n"
            f"w = tfrecord.Writer({str(tmp_path / 'x.tfrecord')!r})\n"
            "w.write(contract.serialize_example(b'img', 1, 'id')); w.close()\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert len(_read(tmp_path / "x.tfrecord")) == 1


def test_records_and_examples_tensorflow_wrote_are_read_back_without_it(tmp_path):
    import tensorflow as tf

    features = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x89PNG"])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[3, -2, 1 << 40])),
                "empty": tf.train.Feature(int64_list=tf.train.Int64List(value=[]))}
    written = tf.train.Example(features=tf.train.Features(feature=features))
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        writer.write(written.SerializeToString())
        writer.write(b"")
    records = list(tfrecord.read_records(tmp_path / "tf.tfrecord"))
    assert records[1] == b""
    assert tfrecord.parse_example(records[0]) == {"image": [b"\x89PNG"],
                                                  "label": [3, -2, 1 << 40], "empty": []}
    assert tfrecord.parse_example(tfrecord.example({"a": [b"x", b""], "b": [7]})) == \
        {"a": [b"x", b""], "b": [7]}
    data = bytearray((tmp_path / "tf.tfrecord").read_bytes())
    data[20] ^= 0xFF
    (tmp_path / "bad.tfrecord").write_bytes(bytes(data))
    with pytest.raises(tfrecord.RecordError, match="fails its CRC"):
        list(tfrecord.read_records(tmp_path / "bad.tfrecord"))
