"""The trainer image's entry point: `python -m trainer.task` (as in Vertex AI's
multi-worker lab), what every replica of a training job runs.

The run itself is `trainer.run.replica`; this module only starts it, so that the command
in images, CustomJobs and local clusters stays the same whatever moves inside `trainer/`.
"""

import sys

from trainer.run.replica import main

if __name__ == "__main__":
    sys.exit(main())
