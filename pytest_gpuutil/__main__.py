"""``python -m pytest_gpuutil``: the gpuutil command line."""
import sys

from pytest_gpuutil.cli import main

sys.exit(main())
