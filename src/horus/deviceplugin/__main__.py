"""``python -m horus.deviceplugin``: the container entrypoint of this role (same as ``horus deviceplugin run``)."""

import sys

from horus.cli import main

raise SystemExit(main(["deviceplugin", "run", *sys.argv[1:]]))
