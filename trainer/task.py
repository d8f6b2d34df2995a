"""The trainer image's entry point: `python -m trainer.task` (as in Vertex AI's
multi-worker lab), what every replica of a training job runs.

The run itself is `trainer.run.replica`; this module only starts it, so that the command
in images, CustomJobs and local clusters stays the same whatever moves inside `trainer/`.
"""

import atexit
import os
import sys

from trainer.run.replica import main


def exit_now(code: int) -> None:
    """Ends the process with `code` once its exit handlers ran and its output is flushed,
    skipping the interpreter's finalization.

    Every record of the run is written and closed before `main` returns, and the `atexit`
    handlers still run (logging's flush, AutoGraph's removal of the modules it generated in
    the temporary directory: `tensorflow/python/autograph/pyct/loader.py`). What
    finalization would add is a race: TensorFlow's daemon threads (ParameterServerStrategy's
    `WorkerClosureProcessingLoop` and `WorkerPreemptionHandler`, in
    `tensorflow/python/distribute/coordinator/cluster_coordinator.py`) may still be inside
    C++ when Python finalizes, and a thread that takes the GIL back then is terminated
    (CPython's `PyEval_RestoreThread`: "Calling this function from a thread when the runtime
    is finalizing will terminate the thread"); through TensorFlow's frames that unwinding
    aborts the process ("terminate called ... FATAL: exception not rethrown", signal 6), so a
    chief that had exported its model exited -6 and failed its job.
    """
    atexit._run_exitfuncs()  # what a normal exit runs first
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
