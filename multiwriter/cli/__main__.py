"""``python -m multiwriter.cli``: the ``multiwriter`` command."""
from multiwriter.cli import main

raise SystemExit(main())
