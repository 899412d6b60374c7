"""`python -m packlm.cache`: the command lives in `packlm.commands.cache`."""

import sys

from packlm.commands.cache import main

if __name__ == "__main__":
    sys.exit(main())
