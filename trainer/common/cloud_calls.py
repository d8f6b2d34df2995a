"""Calls to Google Cloud APIs: one message for their network, credential and API errors.

Every layer that calls a Google API (the CLI's `submit`, the stages on Vertex AI) wraps the
call in `remote_call`, so a refused request, a lost connection or missing credentials end
the command or the stage with one line saying what was being done and why it failed,
instead of a client library's traceback.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from trainer.common.errors import InputError, StageError, first_line

T = TypeVar("T")


class CloudCallError(StageError):
    """A Google Cloud API could not be reached, or refused a request."""


class CredentialsError(InputError):
    """No Google Cloud credentials on this machine."""


@contextlib.contextmanager
def remote_call(what: str) -> Iterator[None]:
    """Turns the client libraries' network and API errors into one clear message.

    Args:
        what: What was being done, for the message (e.g. "submitting the run").

    Raises:
        CredentialsError: No credentials were found.
        CloudCallError: The API could not be reached or refused the request.
    """
    import google.api_core.exceptions as api
    import google.auth.exceptions as auth
    import requests

    try:
        yield
    except auth.DefaultCredentialsError:
        raise CredentialsError(
            f"{what} needs Google Cloud credentials: run `gcloud auth application-default "
            "login` or set GOOGLE_APPLICATION_CREDENTIALS") from None
    except (api.GoogleAPIError, auth.TransportError, auth.RefreshError,
            requests.exceptions.RequestException, ConnectionError, TimeoutError) as exc:
        raise CloudCallError(f"{what} failed: {first_line(exc)}") from None


#: The scope every client of the project asks for (Google's clients narrow it themselves).
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
#: `google.auth.default()`'s answer in this process: (credentials, project) or its error.
_DEFAULT: dict[str, Any] = {}


def default_credentials() -> tuple[Any, str | None]:
    """`google.auth.default()` once per process: (credentials, project ID or None).

    Without credentials its search ends by asking the Compute Engine metadata server,
    three times with back-off (google-auth's `compute_engine._metadata.ping`): about 3 s on
    a laptop, and every client created without credentials searched again (a dry run
    created three). The answer, or the error, is kept for the process.

    Raises:
        google.auth.exceptions.DefaultCredentialsError: There are none (again, at once).
    """
    if not _DEFAULT:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            _DEFAULT["found"] = google.auth.default(scopes=[CLOUD_PLATFORM])
        except DefaultCredentialsError as exc:
            _DEFAULT["error"] = exc
    if "error" in _DEFAULT:
        raise _DEFAULT["error"]
    return _DEFAULT["found"]


def authorized_session() -> Any:
    """An HTTP session with the default credentials, for Google's REST APIs that have no
    client here (IAM, Cloud KMS, Compute Engine's reservations)."""
    from google.auth.transport.requests import AuthorizedSession

    return AuthorizedSession(default_credentials()[0])


def forget_credentials() -> None:
    """Forgets `default_credentials`' answer (the environment that decides it changed)."""
    _DEFAULT.clear()


#: Seconds a read may wait for an answer (a connection, a token, a page) before the
#: network is taken to be unreachable; a dry run makes two such reads (the price catalog,
#: the Model Registry), so it ends within 20 s on a network that drops every connection.
STALL_SECONDS = 5.0
#: Seconds a read may take in all, answering all along (the catalog's pages).
TOTAL_SECONDS = 60.0
#: Once a read got no answer, the next ones wait this long for their first answer (a dry
#: run makes three: the catalog, training.measurements, the Model Registry), until one
#: answers again.
AFTER_NO_ANSWER_SECONDS = 1.0
#: The read that last got no answer in this process ("" once one answered since).
_UNANSWERED = {"what": ""}


class NoAnswer(CloudCallError):
    """A bounded read got no answer in time (a network that drops connections)."""


def bounded_read(what: str, read: Callable[[Callable[[], None]], T], *,
                 stall: float = STALL_SECONDS, total: float = TOTAL_SECONDS) -> T:
    """`read(progress)`, given `stall` seconds between answers and `total` in all.

    Google's clients wait long on a network that drops connections: a token request up to
    120 s (google-auth's default transport timeout), a call without a deadline until
    gRPC's own connect timeout, and again for every page or retry. `read` runs on a
    daemon thread and calls `progress()` after each answer; when it goes `stall` seconds
    without one, or `total` in all, the caller stops waiting (the abandoned thread ends
    with its socket's timeout, or with the process). After a read that got no answer,
    the next waits `AFTER_NO_ANSWER_SECONDS` for its first.

    Raises:
        NoAnswer: The read did not finish in time.
        Exception: What `read` raised.
    """
    unanswered = _UNANSWERED["what"]
    first = min(stall, AFTER_NO_ANSWER_SECONDS) if unanswered else stall
    state = {"last": time.monotonic(), "stall": first}
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def progress() -> None:
        state["last"], state["stall"] = time.monotonic(), stall

    def run() -> None:
        try:
            outcome["value"] = read(progress)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc
        done.set()

    started = time.monotonic()
    threading.Thread(target=run, name=f"read: {what}", daemon=True).start()
    while not done.is_set():
        now = time.monotonic()
        waited = min(state["last"] + state["stall"], started + total) - now
        if waited <= 0:
            _UNANSWERED["what"] = what
            if now - state["last"] < state["stall"]:
                limit = f"not done in {total:g} s"
            else:
                limit = f"no answer in {state['stall']:g} s" + (
                    f", after none from {unanswered}" if state["stall"] < stall else "")
            raise NoAnswer(f"{what}: {limit} (the network drops connections, or is slow)")
        done.wait(waited)
    _UNANSWERED["what"] = ""
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
