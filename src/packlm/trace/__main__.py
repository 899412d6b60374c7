import sys

from packlm.trace.cli import main

sys.exit(main())
