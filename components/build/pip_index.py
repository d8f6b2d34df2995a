"""The images' pip step: a lock file installed from PyPI, or from the package index a build
inside a perimeter names (`vertex.pip_index_url`, passed as the build argument PIP_INDEX).

Standard library only: the Dockerfiles run it with the base image's Python before anything
is installed. An Artifact Registry Python repository (`LOCATION-python.pkg.dev/...`) is
read as the build's own service account: its access token comes from the metadata server,
which a `docker build` on Cloud Build reaches through the `cloudbuild` network, and is
given as the password of the user `oauth2accesstoken` (Artifact Registry docs, "Configure
authentication to Artifact Registry for Python package repositories": access tokens, for
container builds). The token is never printed or written into a layer. Whatever index
serves them, the packages are checked against the lock's hashes (`--require-hashes`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

try:
    from trainer.common.errors import StageError as _Failure
except ImportError:  # run on its own by the image build, without the project
    _Failure = RuntimeError  # type: ignore[assignment,misc]

#: An Artifact Registry repository host (`us-python.pkg.dev`, `europe-west4-apt.pkg.dev`).
ARTIFACT_REGISTRY_HOST = re.compile(r"[a-z0-9-]+-(python|apt|docker)\.pkg\.dev")
#: The metadata server's token route for the machine's service account (Compute Engine
#: docs, "Authenticate using an access token"); GCE_METADATA_HOST moves it, as in google-auth.
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"


class CredentialsError(_Failure):
    """The index's credentials could not be had."""


def is_artifact_registry(url: str) -> bool:
    """Whether `url` is an Artifact Registry repository (read with the build's token)."""
    return bool(ARTIFACT_REGISTRY_HOST.fullmatch(urllib.parse.urlsplit(url).hostname or ""))


def metadata_token(host: str | None = None, timeout: float = 10) -> str:
    """The access token of the machine's service account, from the metadata server.

    Raises:
        CredentialsError: The metadata server could not be reached or gave no token.
    """
    host = host or os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    request = urllib.request.Request(f"http://{host}{TOKEN_PATH}",
                                     headers={"Metadata-Flavor": "Google"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as answer:
            return json.loads(answer.read())["access_token"]
    except (OSError, ValueError, KeyError) as error:
        raise CredentialsError(
            f"no access token from the metadata server at {host} ({error}); an Artifact "
            "Registry index is read as the build's service account, and a docker build "
            "reaches the metadata server only with --network=cloudbuild") from None


def with_credentials(url: str, token: Callable[[], str] = metadata_token) -> str:
    """`url`, with the build account's token when it is an Artifact Registry repository."""
    if not url or not is_artifact_registry(url):
        return url
    parts = urllib.parse.urlsplit(url)
    secret = urllib.parse.quote(token(), safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"oauth2accesstoken:{secret}@"
                                                         f"{parts.netloc}"))


def install_command(lock: str, index: str) -> list[str]:
    """pip's command for `lock`: every package by hash, nothing else (`--no-deps`)."""
    return [sys.executable, "-m", "pip", "install", "--require-hashes", "--no-deps",
            "-r", lock, *(["--index-url", index] if index else [])]


def main(argv: Sequence[str] | None = None,
         run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
         token: Callable[[], str] = metadata_token) -> int:
    """`install LOCK [--index URL]`: the Dockerfiles' pip step."""
    parser = argparse.ArgumentParser(prog="pip_index.py", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("install")
    command.add_argument("lock")
    command.add_argument("--index", default="", metavar="URL",
                         help="the package index (empty: pip's default, PyPI)")
    args = parser.parse_args(argv)
    try:
        index = with_credentials(args.index, token)
    except CredentialsError as error:
        print(f"pip index: {error}", file=sys.stderr)
        return 1
    print(f"pip index: installing {args.lock} from {args.index or 'PyPI'}"
          + (" as the build's service account" if index != args.index else ""), flush=True)
    return run(install_command(args.lock, index)).returncode


if __name__ == "__main__":
    sys.exit(main())
