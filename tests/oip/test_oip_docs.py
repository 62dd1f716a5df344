"""docs/protocol.md's tritonclient example runs, as written, in its own process against a live
server, and prints what the document says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np

from tests.oip.oip_testkit import host_port
from tests.service.service_testkit import ROOT

MARKER = "<!-- oip-example: tests/oip/test_oip_docs.py runs this block -->"


def documented_example() -> tuple[str, str]:
    """(the python block after MARKER, the text block that shows its output)."""
    text = (ROOT / "docs" / "protocol.md").read_text()
    assert MARKER in text, "the example's marker went missing from docs/protocol.md"
    after = text.split(MARKER, 1)[1]
    code = re.search(r"```python\n(.*?)```", after, re.DOTALL).group(1)
    shown = re.search(r"Its output:\n\n```text\n(.*?)```", after, re.DOTALL).group(1)
    return code, shown


def numbers(line: str) -> list[float]:
    return [float(v) for v in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", line)]


def test_the_tritonclient_example_in_the_docs_runs(server):
    code, shown = documented_example()
    assert "import gradserve" not in code and "from service" not in code and "from wire" not in code
    env = {**os.environ, "GRADSERVE_URL": host_port(server)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False, cwd="/"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed, expected = done.stdout.strip().splitlines(), shown.strip().splitlines()
    assert len(printed) == len(expected) == 3, done.stdout
    assert printed[0] == expected[0]
    for got, want in zip(printed[1:], expected[1:]):
        assert got.split()[0] == want.split()[0]
        np.testing.assert_allclose(numbers(got), numbers(want), rtol=1e-5)
