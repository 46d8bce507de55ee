"""python -m benchmarks.gpu_check OUT [--dry-run]: see driver.py."""

from __future__ import annotations

import sys

from benchmarks.gpu_check.driver import main

sys.exit(main())
