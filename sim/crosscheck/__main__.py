import sys

from sim.crosscheck.cli import main

sys.exit(main())
