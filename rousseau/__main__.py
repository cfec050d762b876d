import sys

from rousseau.cli import main

sys.exit(main())
