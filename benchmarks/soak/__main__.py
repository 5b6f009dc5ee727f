"""``python -m benchmarks.soak``: see :mod:`benchmarks.soak.run`."""

import sys

from benchmarks.soak.run import main

sys.exit(main())
