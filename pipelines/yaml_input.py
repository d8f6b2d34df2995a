"""Reading a user's YAML (or JSON) file safely: the one reader of config and pools files.

The file must be UTF-8 and at most 1 MB; nesting, aliases and the document's expanded
size are bounded (a few hundred bytes of aliases can otherwise expand to gigabytes);
duplicate keys are an error instead of the last one silently winning. Every problem is
an `InputError` naming the file, the place and what would be valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainer.common.errors import InputError
from trainer.common.schema import short

MAX_BYTES = 1_000_000
MAX_DEPTH = 32
MAX_ALIASES = 100
MAX_NODES = 100_000


class YamlFileError(InputError):
    """A file that is not YAML this project reads."""


class _Loader(yaml.SafeLoader):
    """SafeLoader with bounded nesting, aliases and size, and no duplicate keys."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._nodes = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise YamlFileError(f"uses more than {MAX_ALIASES} aliases (*name); write the "
                                    "values out")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlFileError(f"nests deeper than {MAX_DEPTH} levels (line {mark.line + 1})")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node, deep=False):
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlFileError(f"expands to more than {MAX_NODES} values")
        return super().construct_object(node, deep)

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise YamlFileError(f"has a key that is not a string or number (line "
                                    f"{key_node.start_mark.line + 1})") from None
            if key in seen:
                raise YamlFileError(f"repeats the key {short(key)} (lines {seen[key]} and "
                                    f"{key_node.start_mark.line + 1}); give each key once")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def _expanded_size(document: Any) -> int:
    """How many values the document holds once its aliases are written out (stops early)."""
    count, stack = 0, [document]
    while stack and count <= MAX_NODES:
        value = stack.pop()
        count += 1
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return count


def read_yaml(path: str | Path, what: str = "file") -> Any:
    """The document of a YAML or JSON file.

    Args:
        path: The file.
        what: How messages name it (e.g. `--config`).

    Raises:
        YamlFileError: The file cannot be read, or is not YAML within the bounds.
    """
    where = f"{what} {str(path)!r}"
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlFileError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise YamlFileError(f"{where} is larger than {MAX_BYTES // 1000} kB; a configuration "
                            "is a few kB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"{where} is not UTF-8 text (byte {exc.start}: "
                            f"{raw[exc.start:exc.start + 1]!r}); save it as UTF-8") from None
    loader = _Loader(text)
    try:
        document = loader.get_single_data()
        if _expanded_size(document) > MAX_NODES:  # aliases share nodes; expanded, they add up
            raise YamlFileError(f"expands to more than {MAX_NODES} values (through aliases)")
        return document
    except YamlFileError as exc:
        raise YamlFileError(f"{where} {exc}") from None
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{where} is not valid YAML: {short(str(exc), 300)}") from None
    except RecursionError:
        raise YamlFileError(f"{where} nests too deeply") from None
    finally:
        loader.dispose()
