"""`python -m service [serve ...]`: serve with settings from the environment (and any flags)."""

import sys

from service.cli import main

args = sys.argv[1:]
sys.exit(main(args if args and not args[0].startswith("-") else ["serve", *args]))
