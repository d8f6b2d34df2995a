"""The images' pip step inside a perimeter: the lock from the configured index, an Artifact
Registry index read with the build account's token from a metadata server on loopback."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading

import pytest

from components.build import pip_index
from tests.support.paths import ROOT

AR_INDEX = "https://us-python.pkg.dev/my-proj/pypi/simple/"


@pytest.fixture
def metadata():
    """A metadata server on loopback answering the token route; yields (host, requests)."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Metadata-Flavor")))
            body = json.dumps({"access_token": "ya29.t/k+n", "expires_in": 3599}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_port}", seen
    server.shutdown()
    server.server_close()
    thread.join()


def test_an_artifact_registry_index_is_read_as_the_build_account(metadata, monkeypatch, capsys):
    host, seen = metadata
    monkeypatch.setenv("GCE_METADATA_HOST", host)
    ran = []
    code = pip_index.main(["install", "requirements/gpu.lock", "--index", AR_INDEX],
                          run=lambda command: ran.append(command)
                          or subprocess.CompletedProcess(command, 0))
    assert code == 0
    assert seen == [(pip_index.TOKEN_PATH, "Google")]
    (command,) = ran
    assert command[1:] == ["-m", "pip", "install", "--require-hashes", "--no-deps", "-r",
                           "requirements/gpu.lock", "--index-url",
                           "https://oauth2accesstoken:ya29.t%2Fk%2Bn@us-python.pkg.dev/my-proj/"
                           "pypi/simple/"]
    out = capsys.readouterr().out
    assert out == (f"pip index: installing requirements/gpu.lock from {AR_INDEX} as the "
                   "build's service account\n")
    assert "ya29" not in out  # the token is never printed


def test_other_indexes_and_pypi_are_used_as_given():
    assert pip_index.with_credentials("https://nexus.corp.example/simple/",
                                      token=lambda: pytest.fail("no token")) == \
        "https://nexus.corp.example/simple/"
    assert pip_index.install_command("l.lock", "")[-2:] == ["-r", "l.lock"]


def test_the_build_step_says_why_without_a_metadata_server(tmp_path):
    """As the Dockerfile runs it (the script alone, the base image's Python): a docker
    build without --network=cloudbuild reaches no metadata server."""
    shutil.copyfile(ROOT / "components/build/pip_index.py", tmp_path / "pip_index.py")
    done = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "pip_index.py"),
                           "install", "x.lock", "--index", AR_INDEX], capture_output=True,
                          text=True, env={"GCE_METADATA_HOST": "127.0.0.1:9", "PATH": "/usr/bin"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("pip index: no access token from the metadata server at "
                                  "127.0.0.1:9")
    assert "--network=cloudbuild" in done.stderr
