"""``python -m python_ingest.cli``: the same as the ``sluice`` command."""

import sys

from python_ingest.cli.main import main

sys.exit(main())
