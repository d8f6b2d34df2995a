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
from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO

import google_crc32c

from trainer.common.errors import StageError

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


class RecordError(StageError):
    """A TFRecord file or an Example that is not what this module writes (a damaged
    dataset: the stage reading it fails)."""


def read_records(path: str | os.PathLike) -> Iterator[bytes]:
    """The records of a TFRecord file, each frame's CRCs checked."""
    with open(path, "rb") as f:
        while header := f.read(12):
            if len(header) < 12:
                raise RecordError(f"{path}: truncated record header")
            length, crc = struct.unpack("<QI", header)
            if crc != masked_crc(header[:8]):
                raise RecordError(f"{path}: a record length fails its CRC")
            data, footer = f.read(length), f.read(4)
            if len(data) < length or len(footer) < 4 or \
                    struct.unpack("<I", footer)[0] != masked_crc(data):
                raise RecordError(f"{path}: a record is truncated or fails its CRC")
            yield data


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, payload) of each length-delimited field of a message (the only wire
    type `example` writes)."""
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        if key & 7 != _LENGTH_DELIMITED:
            raise RecordError(f"field {key >> 3} has wire type {key & 7}; expected bytes")
        length, at = _read_varint(data, at)
        yield key >> 3, data[at:at + length]
        at += length


def parse_example(record: bytes) -> dict[str, list[bytes] | list[int]]:
    """A serialised `tf.train.Example`'s bytes and int64 features (`example`'s inverse)."""
    found: dict[str, list[bytes] | list[int]] = {}
    for _, entries in _fields(record):  # Example.features
        for _, entry in _fields(entries):  # Features.feature map entries
            parts = dict(_fields(entry))
            name, feature = parts[1].decode("utf-8"), dict(_fields(parts.get(2, b"")))
            if 1 in feature:  # bytes_list
                found[name] = [value for _, value in _fields(feature[1])]
            else:  # int64_list, packed
                packed, values, at = dict(_fields(feature.get(3, b""))).get(1, b""), [], 0
                while at < len(packed):
                    value, at = _read_varint(packed, at)
                    values.append(value - (1 << 64) if value >> 63 else value)
                found[name] = values
    return found
