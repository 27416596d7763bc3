"""``python -m linattn_core.mqar``: train the attention layers on multi-query associative recall.

The code lives in :mod:`linattn_core.lm.mqar`; this name is the command readers type.
"""

from .lm.mqar import main

if __name__ == "__main__":
    main()
