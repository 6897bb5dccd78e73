"""What every benchmark script shares: print its JSON result and write it to ``--out``."""

from __future__ import annotations

import json
from pathlib import Path


def emit(result: dict, out: Path | str | None) -> None:
    """Print ``result`` as JSON, and write it to ``out`` (parents created) when given."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
