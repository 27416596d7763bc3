"""``python -m linattn_core.bench``: softmax against linear attention on this machine, with targets.

The code lives in :mod:`linattn_core.tools.bench`; this name is the command readers type.
"""

import sys

from .tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
