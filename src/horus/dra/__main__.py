"""``python -m horus.dra``: the container entrypoint of this role (same as ``horus dra run``)."""

import sys

from horus.cli import main

raise SystemExit(main(["dra", "run", *sys.argv[1:]]))
