"""``python -m pytest_gpuutil``: the gpuutil command line."""
import sys

from .cli import main

sys.exit(main())
