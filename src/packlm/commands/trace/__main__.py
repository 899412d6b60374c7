import sys

from packlm.commands.trace.cli import main

sys.exit(main())
