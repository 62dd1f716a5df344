"""Runs a chain of documented Python blocks in one namespace, as one interpreter session would.

`python exec_blocks.py BLOCKS_JSON SENTINEL`: BLOCKS_JSON lists {"path", "line", "code"}; each block
runs after the one before it (so a continuing block sees its names), and SENTINEL is printed on
a line of its own after each block that finished. A traceback names the document and its line.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    path, sentinel = sys.argv[1], sys.argv[2]
    with open(path) as source:
        chain = json.load(source)
    namespace = {"__name__": "__main__"}
    for block in chain:
        # the fence's line is block["line"], so its first code line is the next one
        code = compile("\n" * block["line"] + block["code"], block["path"], "exec")
        exec(code, namespace)
        sys.stdout.flush()
        print(f"\n{sentinel}", flush=True)


if __name__ == "__main__":
    main()
