"""``python -m horus`` is the ``horus`` command."""

from horus.cli import main

raise SystemExit(main())
