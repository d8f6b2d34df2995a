"""Declared options: one pydantic model per concern, and everything derived from it.

An option is declared once, as a field of a frozen pydantic model with its type, range or
allowed values, default and description. From that declaration come the command-line
flags (`add_arguments`), the flags passed on to the trainer (`to_flags`), the JSON schema
of the config file, the pipeline's dict parameters (`model_dump`), and the messages for
bad values, which always name the field, the value and what would be valid.
"""

from __future__ import annotations

import argparse
import math
import re
import reprlib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, TypeVar

import pydantic
from pydantic import AfterValidator, BeforeValidator, ConfigDict
from pydantic.fields import FieldInfo

from trainer.common.errors import InputError

M = TypeVar("M", bound=pydantic.BaseModel)

#: Config shared by every options model: unknown keys are errors, values are frozen, and
#: types are strict (YAML's `"10"` is not 10; an integer is still a valid float).
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class OptionsError(InputError):
    """Option values that cannot be used; one line per problem.

    Attributes:
        problems: The problems, each naming the field, the value and what is valid.
        fields: The top-level fields whose values were refused.
    """

    def __init__(self, problems: Iterable[str], title: str = "", fields: Iterable[str] = ()):
        self.problems = list(problems)
        self.fields = set(fields)
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{title}:\n{body}" if title else "; ".join(self.problems))


def _switch(value: Any) -> Any:
    # YAML 1.1 reads on/off/yes/no as booleans: `xla: on` means "on", not "expected a string".
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


#: A setting that is forced on, forced off, or decided by the machine (`auto`).
Switch = Annotated[Literal["auto", "on", "off"], BeforeValidator(_switch)]


def _precision(value: Any) -> Any:
    # `on` (and YAML's true) meant mixed_float16 before bfloat16 was offered; it still does.
    value = _switch(value)
    return "float16" if value == "on" else value


#: Mixed precision: `auto` (the training plan decides), `off`, or a compute type.
Precision = Annotated[Literal["auto", "off", "float16", "bfloat16", "on"],
                      AfterValidator(_precision), BeforeValidator(_switch)]


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 200
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 8
_REPR.maxlevel = 3


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters: messages stay readable whatever the input
    (a huge or deeply nested value is never rendered whole)."""
    try:
        text = _REPR.repr(value)
    except RecursionError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 5] + " ...>"


def _bounds(field: FieldInfo) -> dict[str, float]:
    found = {}
    for item in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            value = getattr(item, name, None)
            if value is not None:
                found[name] = value
    return found


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _optional(annotation: Any) -> tuple[Any, bool]:
    """(the type, whether it may be None) of `X | None` and of a plain `X`."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return annotation, False


def describe(field: FieldInfo) -> str:
    """What a field accepts, in words: `an integer from 1 to 8`, `one of auto, on, off`."""
    annotation, optional = _optional(field.annotation)
    if optional:
        inner = FieldInfo.merge_field_infos(field, annotation=annotation)
        return f"{describe(inner)}, or nothing"
    annotation = field.annotation
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(v) for v in typing.get_args(annotation))
    if annotation is bool:
        return "true or false"
    if annotation in (int, float):
        noun = "an integer" if annotation is int else "a finite number"
        b = _bounds(field)
        low = ("ge", b["ge"]) if "ge" in b else ("gt", b["gt"]) if "gt" in b else None
        high = ("le", b["le"]) if "le" in b else ("lt", b["lt"]) if "lt" in b else None
        if low and high and low[0] == "ge" and high[0] == "le":
            return f"{noun} from {_number(low[1])} to {_number(high[1])}"
        if low and high:
            return (f"{noun} in {'[' if low[0] == 'ge' else '('}{_number(low[1])}, "
                    f"{_number(high[1])}{']' if high[0] == 'le' else ')'}")
        if low:
            return f"{noun} {'>=' if low[0] == 'ge' else '>'} {_number(low[1])}"
        if high:
            return f"{noun} {'<=' if high[0] == 'le' else '<'} {_number(high[1])}"
        return noun
    if annotation is str:
        # A field with a pattern says in words what it matches (`json_schema_extra`'s
        # `valid`), else its description must.
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("valid"):
            return str(extra["valid"])
        patterned = any(getattr(item, "pattern", None) for item in field.metadata)
        return field.description if patterned and field.description else "a string"
    origin = typing.get_origin(annotation)
    if origin in (dict, Mapping):
        return "a mapping"
    if origin in (list, tuple):
        return "a list"
    return field.description or "a valid value"


def _field_at(model: type[pydantic.BaseModel], loc: tuple) -> tuple[Any, FieldInfo | None]:
    """The model and field a pydantic error location points at (None past a leaf)."""
    field = None
    for part in loc:
        if isinstance(part, int) and typing.get_origin(model) in (list, tuple):
            model = typing.get_args(model)[0]  # an item of a list of models
            continue
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            return model, None
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return model, None
        model = field.annotation
    return model, field


def _unknown_field(model: type[pydantic.BaseModel], loc: tuple, path: str) -> str:
    """A field the model does not have: the closest one when it looks mistyped, else every
    valid field."""
    from trainer.common.suggest import closest

    parent, _ = _field_at(model, loc[:-1]) if len(loc) > 1 else (model, None)
    fields = sorted(getattr(parent, "model_fields", {}))
    where = path.rpartition(".")[0]
    near = closest(str(loc[-1]), fields) if loc else None
    if near:
        return f"unknown field {path} (did you mean {f'{where}.' if where else ''}{near}?)"
    return (f"unknown field {path}; valid fields {f'of {where} ' if where else ''}are "
            f"{', '.join(fields) or 'none'}")


def messages(error: pydantic.ValidationError, model: type[pydantic.BaseModel],
             prefix: str = "") -> list[str]:
    """One message per problem of a pydantic validation error, in the project's words."""
    found = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        # `Switch` and similar annotated types add their validator's name to the location.
        while loc and isinstance(loc[-1], str) and ("[" in loc[-1] or "(" in loc[-1]):
            loc = loc[:-1]
        path = ".".join(str(p) for p in (prefix, *loc) if p != "")
        path = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)  # list items as fallbacks[1]
        owner, field = _field_at(model, loc)
        value = short(item.get("input"))
        kind = item["type"]
        if kind == "extra_forbidden":
            found.append(_unknown_field(model, loc, path))
        elif kind in ("value_error", "assertion_error"):
            found.append(f"{path} is {value}; {str(item['msg']).split(', ', 1)[-1]}")
        elif kind in ("model_type", "model_attributes_type", "dict_type") \
                and isinstance(owner, type) and issubclass(owner, pydantic.BaseModel):
            found.append(f"{path} is {value}; expected a mapping with the fields "
                         f"{', '.join(owner.model_fields)}")
        elif field is not None:
            found.append(f"{path} is {value}; expected {describe(field)}")
        else:
            found.append(f"{path or 'value'} is {value}; {item['msg'].lower()}")
    return found


def validate(model: type[M], data: Any, *, prefix: str = "", title: str = "",
             strict: bool | None = None) -> M:
    """Validates `data` into `model`.

    Args:
        model: The options model.
        data: A mapping of field values (missing fields take their defaults).
        prefix: Path of the model in messages (`training`).
        title: First line of the error message.
        strict: False for values that travelled as JSON or protobuf Struct (where 10
            arrives as 10.0); None keeps the model's own strictness.

    Returns:
        The validated, frozen options.

    Raises:
        OptionsError: Listing every problem.
    """
    try:
        result = model.model_validate(data, strict=strict)
    except pydantic.ValidationError as exc:
        refused = {e["loc"][0] for e in exc.errors() if e["loc"]}
        raise OptionsError(messages(exc, model, prefix), title, refused) from None
    except RecursionError:
        raise OptionsError([f"{prefix or 'value'} is nested too deeply"], title) from None
    found = cross_field_problems(result, prefix)
    if found:
        raise OptionsError(found, title)
    return result


def cross_field_problems(options: pydantic.BaseModel, prefix: str = "") -> list[str]:
    """The problems that a model's `problems()` method (and its nested models') report.

    A field's own rules live in its declaration; rules between fields live in a
    `problems()` method that returns messages relative to the model.
    """
    found = []
    for name in type(options).model_fields:
        value = getattr(options, name)
        if isinstance(value, pydantic.BaseModel):
            found += cross_field_problems(value, f"{prefix}.{name}" if prefix else name)
    check = getattr(options, "problems", None)
    if callable(check):
        found += [f"{prefix}.{p}" if prefix else p for p in check()]
    return found


def flag(name: str) -> str:
    """The command-line flag of a field: `batch_size` -> `--batch-size`."""
    return "--" + name.replace("_", "-")


def _whole_number(text: str) -> int:
    """An integer flag's value; `16.0` is 16, as a tuning service may write a DISCRETE
    value (the API holds them as doubles)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(value)


def _parser_type(field: FieldInfo) -> Any:
    annotation, _ = _optional(field.annotation)
    if typing.get_origin(annotation) is Literal:
        return str
    if annotation is int:
        return _whole_number
    return annotation if annotation in (float, str) else None


def add_arguments(parser: argparse.ArgumentParser | Any, model: type[pydantic.BaseModel], *,
                  with_defaults: bool, prefix: str = "",
                  underscore_aliases: bool = False) -> dict[str, str]:
    """Adds a flag for every scalar field of `model`.

    Args:
        parser: Parser or argument group to add to.
        model: The options model.
        with_defaults: Give flags the declared defaults (the trainer), or None so that only
            the flags given override another source (the CLI over a config file).
        prefix: Flag and destination prefix (`dataset` gives `--dataset-source`).
        underscore_aliases: Also accept `--batch_size` for `--batch-size`: Vertex AI passes
            a tuning trial's parameters as `--<parameter_id>=<value>`, and parameter ids
            are the options' names.

    Returns:
        Destination name -> field name, for `given`.
    """
    added = {}
    for name, field in model.model_fields.items():
        dest = f"{prefix}_{name}" if prefix else name
        default = field.default if with_defaults else None
        # argparse %-formats help: a literal % in a description is doubled.
        help_text = f"{field.description or name} Valid: {describe(field)}; default: " \
                    f"{_plain(field.default)}.".replace("%", "%%")
        names = [flag(dest)]
        if underscore_aliases and "_" in dest:
            names.append("--" + dest)
        if _optional(field.annotation)[0] is bool:
            parser.add_argument(*names, dest=dest, action=argparse.BooleanOptionalAction,
                                default=default, help=help_text)
        elif _parser_type(field) is not None:
            kind = _optional(field.annotation)[0]
            choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else None
            parser.add_argument(*names, dest=dest, type=_parser_type(field),
                                default=default, choices=choices,
                                metavar=None if choices else name.upper(), help=help_text)
        else:
            continue
        added[dest] = name
    return added


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return '""' if value == "" else str(value)


def given(namespace: argparse.Namespace, fields: Mapping[str, str]) -> dict[str, Any]:
    """Field -> value for the flags (`add_arguments`' result) given on the command line."""
    return {name: getattr(namespace, dest) for dest, name in fields.items()
            if getattr(namespace, dest, None) is not None}


def to_flags(options: pydantic.BaseModel) -> list[str]:
    """The command-line flags that reproduce `options` (for the trainer's container args)."""
    flags = []
    for name, field in type(options).model_fields.items():
        value = getattr(options, name)
        if value is None:
            continue
        if _optional(field.annotation)[0] is bool:
            flags.append(flag(name) if value else "--no-" + name.replace("_", "-"))
        elif _parser_type(field) is not None:
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} is {value}")  # excluded by validation
            flags += [flag(name), str(value)]
    return flags
