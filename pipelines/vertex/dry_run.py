"""How a dry run shows a request it would send: one line (its kind, target and size) by
default, so that the whole dry run fits on two screens; the JSON body the API would
receive with `--verbose`; with `--json`, every request in one JSON document on stdout
(`document`), the lines on stderr."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipelines.vertex.clients import to_json

#: The dry run's last line.
NOTHING_SENT = "dry run: nothing was uploaded, built or submitted"


def target(request: Any) -> str:
    """The resource a request names (its parent, name or endpoint)."""
    for field in ("parent", "name", "endpoint", "project_id"):
        value = getattr(request, field, "")
        if value:
            return str(value)
    return ""


def show(request: Any, log: Callable[[str], None], *, verbose: bool,
         sent: list[Any] | None = None) -> None:
    """`request` (a proto-plus message) as the dry run shows it; kept in `sent` too when
    the dry run prints them as one document."""
    if sent is not None:
        sent.append(request)
    body = to_json(request)
    if verbose:
        print(body)
        return
    log(f"  {type(request).__name__} to {target(request) or 'its service'}: "
        f"{len(body.encode()):,} bytes (--verbose prints it)")


def show_text(what: str, body: str, log: Callable[[str], None], *, verbose: bool) -> None:
    """A body that is not a request message (e.g. Beam's pipeline options), likewise."""
    if verbose:
        print(body)
        return
    log(f"  {what}: {len(body.encode()):,} bytes (--verbose prints it)")


def document(sent: list[Any], **more: Any) -> str:
    """`submit --dry-run --json`: every request the run would send (its kind, target and
    body as the API receives it), and `more`, as one JSON document."""
    import json

    return json.dumps({"requests": [{"kind": type(r).__name__, "target": target(r),
                                     "body": json.loads(to_json(r))} for r in sent],
                       **more, "sent": False}, indent=2)
