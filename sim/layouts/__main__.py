import sys

from sim.layouts.cli import main

sys.exit(main())
