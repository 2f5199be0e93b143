"""One logging setup for every Horus process, so logs of all roles read the same."""

import logging
import os
import sys

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(level: str | None = None) -> None:
    """Configure the root logger once; ``HORUS_LOG_LEVEL`` is used when ``level`` is None."""
    chosen = (level or os.environ.get("HORUS_LOG_LEVEL") or "INFO").upper()
    if chosen not in logging.getLevelNamesMapping():
        chosen = "INFO"
    logging.basicConfig(level=chosen, format=_FORMAT, stream=sys.stderr, force=True)
