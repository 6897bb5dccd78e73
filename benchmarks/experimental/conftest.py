"""Lets the parity tests import the experimental modules beside them."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
