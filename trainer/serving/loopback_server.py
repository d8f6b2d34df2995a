"""aiplatform's model server as `gpu-pipeline serve` runs it on a workstation:
`python -m trainer.serving.loopback_server --host 127.0.0.1`.

The same app, predictor and workers as the serving container's
(`google.cloud.aiplatform.prediction.model_server`, its `CprModelServer` and
`set_number_of_workers_from_env`), on the host asked for. aiplatform's own `__main__`
binds 0.0.0.0, which a container needs (Vertex AI's health checks and requests come from
outside it) but which, on a workstation, offers the model to every network the machine is
on; so `serve` binds loopback unless told otherwise, and uvicorn logs warnings only.
"""

from __future__ import annotations

import argparse
import os
import sys

#: aiplatform's model server app (a factory), as its `__main__` names it.
APP = "google.cloud.aiplatform.prediction.model_server:CprModelServer"


def main(argv: list[str] | None = None) -> int:
    """Runs the server until it is stopped (the `AIP_*` variables configure it)."""
    parser = argparse.ArgumentParser(prog="python -m trainer.serving.loopback_server")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    import uvicorn
    from google.cloud.aiplatform.prediction import model_server

    model_server.set_number_of_workers_from_env()
    uvicorn.run(APP, host=args.host, port=int(os.environ["AIP_HTTP_PORT"]), factory=True,
                log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
