"""TFRecord files of `tf.train.Example` records, written without TensorFlow.

The dataset stage writes shards and nothing else of TensorFlow's: importing it costs 2-3 s
per process, most of a small dataset's preparation. Both formats are small and fixed:

- a TFRecord is, per record, the length (uint64, little-endian), its masked CRC-32C
  (uint32), the data, and the data's masked CRC-32C ("TFRecords format details" in
  TensorFlow's TFRecord guide; `tensorflow/core/lib/io/record_writer.cc`);
- a `tf.train.Example` is a protocol buffer (`tensorflow/core/example/example.proto`,
  `feature.proto`): `Example.features` (1) holds the map `Features.feature` (1) of
  name -> `Feature`, whose `bytes_list` (1) and `int64_list` (3, packed) hold the values.

The tests read what this writes with TensorFlow's own reader and parser.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Mapping, Sequence
from typing import BinaryIO

import google_crc32c

_MASK_DELTA = 0xA282EAD8
_LENGTH_DELIMITED = 2


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data` (rotated right by 15 bits, plus a constant)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record as stored in a TFRecord file."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc(length)) + data
            + struct.pack("<I", masked_crc(data)))


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s are sent as their two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (bytes, string, message or packed values)."""
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def _feature(values: Sequence[bytes] | Sequence[int]) -> bytes:
    if all(isinstance(v, bytes) for v in values):  # Feature.bytes_list = 1
        return _field(1, b"".join(_field(1, v) for v in values))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _field(3, _field(1, b"".join(_varint(v) for v in values)))  # int64_list = 3
    raise TypeError(f"feature values must be all bytes or all ints, got {values!r}")


def example(features: Mapping[str, Sequence[bytes] | Sequence[int]]) -> bytes:
    """A serialised `tf.train.Example` with these bytes or int64 features."""
    entries = b"".join(_field(1, _field(1, name.encode("utf-8")) + _field(2, _feature(values)))
                       for name, values in features.items())
    return _field(1, entries)


class Writer:
    """Writes records to a TFRecord file (like `tf.io.TFRecordWriter`, uncompressed).

    It counts and hashes what it writes, so a shard's size and SHA-256 are known without
    reading it back (the manifest records both).

    Attributes:
        records: Records written.
        bytes: Bytes written.
    """

    def __init__(self, path_or_file: str | os.PathLike | BinaryIO):
        # A path is opened (and closed) here; an open binary file (Beam's FileSystems on
        # Cloud Storage) is written and closed all the same.
        self._file: BinaryIO = path_or_file if hasattr(path_or_file, "write") \
            else open(path_or_file, "wb")
        self._hash = hashlib.sha256()
        self.records = 0
        self.bytes = 0

    def write(self, record: bytes) -> None:
        """Appends one record."""
        data = frame(record)
        self._file.write(data)
        self._hash.update(data)
        self.records += 1
        self.bytes += len(data)

    def sha256(self) -> str:
        """The SHA-256 of what was written, in hex."""
        return self._hash.hexdigest()

    def close(self) -> None:
        """Flushes and closes the file."""
        self._file.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
