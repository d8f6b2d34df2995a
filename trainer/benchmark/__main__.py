"""`python -m trainer.benchmark`: the GPU benchmark (`trainer.benchmark.runner`)."""

import sys

from trainer.benchmark.runner import main

if __name__ == "__main__":
    sys.exit(main())
