"""A dry run with credentials on a network that drops every connection (a laptop on a
train, a locked-down CI runner) ends within 20 s, on the newest cached prices or the
shipped table, and says in one line each what could not be read.

The CLI runs as a user runs it, with a service-account key; every connection it opens
(HTTP and gRPC alike honour `https_proxy`) goes to a proxy on loopback that accepts and
never answers, or to a closed port (a network that refuses)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trainer.common import cloud_calls
from trainer.common.cloud_calls import NoAnswer, bounded_read

BIN = Path(sys.executable).parent / "gpu-pipeline"
VERTEX = ["--project", "my-proj", "--pipeline-root", "gs://pipelines-x/root",
          "--image-repository", "us-central1-docker.pkg.dev/my-proj/ml-images"]


class SilentProxy:
    """Accepts every connection and never answers; counts them."""

    def __init__(self):
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self):
        self._server.close()
        for conn in self.accepted:
            conn.close()


def _service_account_key(path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "my-proj", "private_key_id": "k1",
        "private_key": pem, "client_email": "ci@my-proj.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": "https://oauth2.googleapis.com/token"}))
    return path


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    return _service_account_key(tmp_path_factory.mktemp("key") / "key.json")


@pytest.mark.parametrize(("command", "network"), [
    (["submit", "--dry-run"], "drops"), (["schedule", "create", "--dry-run"], "refuses")],
    ids=["submit-drops", "schedule-refuses"])
@pytest.mark.slow
def test_a_dry_run_without_a_reachable_network_ends_within_20_s_on_fallback_prices(
        tmp_path, key, command, network):
    proxy = SilentProxy()
    port = proxy.port
    if network == "refuses":
        proxy.close()
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(GOOGLE_APPLICATION_CREDENTIALS=str(key), HOME=str(tmp_path),
               XDG_CACHE_HOME=str(tmp_path / "cache"), https_proxy=f"http://127.0.0.1:{port}",
               HTTPS_PROXY=f"http://127.0.0.1:{port}", http_proxy=f"http://127.0.0.1:{port}")
    started = time.monotonic()
    try:
        done = subprocess.run([str(BIN), *command, *VERTEX], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    finally:
        proxy.close()
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert seconds < 20, seconds
    lines = done.stdout.splitlines()
    # One line for each read: training.measurements (the plan), and for submit the
    # catalog (prices then from the shipped table) and the registry (no measured speed).
    (measured,) = [line for line in lines if "measurements: warning: " in line]
    assert "gs://pipelines-x/root/measurements/" in measured
    if command[0] == "submit":
        (prices,) = [line for line in lines if "] prices: " in line]
        assert "Cloud Billing Catalog API" in prices
        (estimate,) = [line for line in lines
                       if line.split("] ", 1)[-1].strip().startswith("primary (us-central1):")]
        assert "from the shipped table" in estimate
        (registry,) = [line for line in lines if "no measured run: " in line]
        assert "Model Registry" in registry
    assert "Traceback" not in done.stderr
    if network == "drops":
        assert proxy.accepted  # it did try, through the proxy and nowhere else


@pytest.mark.slow
def test_a_bounded_read_gives_up_without_an_answer_and_waits_while_answers_come():
    release = threading.Event()
    cloud_calls._UNANSWERED["what"] = ""
    try:
        with pytest.raises(NoAnswer, match="no answer in 0.2 s"):
            bounded_read("silent", lambda progress: release.wait(30), stall=0.2)
        # The next read waits less for its first answer, and one that answers resets it.
        assert cloud_calls._UNANSWERED["what"] == "silent"
        with pytest.raises(NoAnswer, match="after none from silent"):
            bounded_read("next", lambda progress: release.wait(30), stall=60,
                         total=120)
    finally:
        release.set()

    def answering(progress):
        for _ in range(6):  # 6 answers 0.1 s apart: 0.6 s in all, never 0.3 s silent
            time.sleep(0.1)
            progress()
        return "read"

    cloud_calls._UNANSWERED["what"] = ""
    assert bounded_read("pages", answering, stall=0.3) == "read"
    assert cloud_calls._UNANSWERED["what"] == ""
    with pytest.raises(ValueError, match="refused"):
        bounded_read("failing", lambda progress: (_ for _ in ()).throw(ValueError("refused")))
    with pytest.raises(NoAnswer, match="not done in 0.3 s"):
        bounded_read("endless", lambda progress: [progress() or time.sleep(0.05)
                                                  for _ in range(40)], stall=1, total=0.3)
