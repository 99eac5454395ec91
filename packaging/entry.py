"""Entry point of the frozen app (PyInstaller): the same launcher as `mtp-studio`."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    from app.launcher import main

    sys.exit(main())
