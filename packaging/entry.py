"""PyInstaller entry point of the frozen `lite` executable: the same `main` as the console script."""

import sys

from lite.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
