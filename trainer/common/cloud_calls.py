"""Calls to Google Cloud APIs: one message for their network, credential and API errors.

Every layer that calls a Google API (the CLI's `submit`, the stages on Vertex AI) wraps the
call in `remote_call`, so a refused request, a lost connection or missing credentials end
the command or the stage with one line saying what was being done and why it failed,
instead of a client library's traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from trainer.common.errors import InputError, StageError, first_line


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
            "login` or set GOOGLE_APPLICATION_CREDENTIALS (`--dry-run` needs none)") from None
    except (api.GoogleAPIError, auth.TransportError, auth.RefreshError,
            requests.exceptions.RequestException, ConnectionError, TimeoutError) as exc:
        raise CloudCallError(f"{what} failed: {first_line(exc)}") from None
