"""``python -m horus.agent``: the container entrypoint of this role (same as ``horus agent run``)."""

import sys

from horus.cli import main

raise SystemExit(main(["agent", "run", *sys.argv[1:]]))
