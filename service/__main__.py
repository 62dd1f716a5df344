"""`python -m service [serve ...]`: serve with settings from the environment (and any flags);
`python -m service --version`."""

import sys

from service.cli import main

args = sys.argv[1:]
sys.exit(main(args if args and (not args[0].startswith("-") or args[0] == "--version") else ["serve", *args]))
