"""Run the service: ``python server.py`` (same flags as ``ccweb-store serve``)."""

import sys

from ccweb_store.cli import main

if __name__ == "__main__":
    main(["serve", *sys.argv[1:]])
