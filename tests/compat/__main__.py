import sys

from tests.compat.matrix import main

sys.exit(main())
