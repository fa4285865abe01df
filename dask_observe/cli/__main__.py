"""``python -m dask_observe.cli``."""

import sys

from dask_observe.cli import main

sys.exit(main())
