"""`python -m packlm.cache`: the command lives in `packlm.commands.cache`."""

import sys

from packlm.commands.cache import main

sys.exit(main())
