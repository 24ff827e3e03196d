"""``python -m kvtutor.bench ...``, the same as ``python -m kvtutor bench ...``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
