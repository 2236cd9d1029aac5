import sys

from qflow.cli import main

sys.exit(main())
