"""``python -m linattn_core.train``: train one of the book's small language models.

The code lives in :mod:`linattn_core.lm.train`; this name is the command readers type.
"""

from .lm.train import main

if __name__ == "__main__":
    main()
