"""``python -m horus.operator``: the container entrypoint of this role (same as ``horus operator run``)."""

import sys

from horus.cli import main

raise SystemExit(main(["operator", "run", *sys.argv[1:]]))
