"""`python -m unsee.impl.cli`: the `unsee` command."""

import sys

from unsee.impl.cli import main

sys.exit(main())
