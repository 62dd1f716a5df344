"""Every example in README.md, client/README.md and docs/*.md runs, and prints what the page shows.

How a document writes an example that this module runs (tests/docs/extract.py has the details):

- A ```` ```python ```` or ```` ```sh ```` (`bash`, `shell`, `console`) fence runs: Python in a fresh
  interpreter, shell in bash with `set -eo pipefail`, in a working directory of the document's own,
  with this checkout on PYTHONPATH. It must finish without an error (every command with status 0).
- Its output is the ```` ```json ````, ```` ```text ```` or bare fence right after it (blank lines,
  or one line of prose ending in "output:", may come between). A shell fence whose lines start
  with `$ ` is a transcript: the lines after each `$ ` command are that command's output (a
  trailing backslash continues a command). JSON is compared as data (floats to 1e-6 relative),
  the rest line by line as text, after the normalisations of `compare.VOLATILE` (addresses,
  tape ids, the Date header, the release version, the CPU-dependent `max_concurrency`).
- `http://127.0.0.1:8000` (any `127.0.0.1:PORT` or `localhost:PORT`) is replaced by a live
  `python -m service` that this module starts with the defaults on CPU, one for the module.
- Marks are HTML comments on the lines right above a fence:
  `<!-- not-run: why -->` (a Docker engine, `pip install`, `gradserve serve` itself: keep them few),
  `<!-- continues: previous -->` (runs after the document's previous block of its language, in
  the same interpreter or shell session), `<!-- file: NAME -->` on a non-runnable fence (its text
  is written to NAME in the working directory first, e.g. the `request.json` that curl posts), and
  `<!-- server: GRADSERVE_API_KEY=s3cret ... -->` (the block and its continuations get a fresh
  server of their own with these settings, so what they show of its state is theirs alone).
- A test's id is the block's `file:line`; a transcript's failing command is named by its line.

`PYTHONPATH=$PWD python -m pytest -q tests/docs` runs them (about 20 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.docs import extract
from tests.docs.compare import difference, same_output
from tests.docs.run import Ran, live_server, run_chain, server_settings, write_files

# Blocks of sections another helper of issue 20 owns (the Docker section of README.md, and
# docs/deployment.md) that still lack their `<!-- not-run: needs a Docker engine -->` mark: a
# shell fence there starting with `docker` or `kubectl`. Delete this once they carry the mark
# (test_blocks_awaiting_a_mark_are_still_there fails then, to say so).
AWAITING_A_MARK: dict = {}

# A parsing regression must not silently run nothing: each document has at least these many
# runnable blocks, and these many with an output shown.
MINIMUM = {
    "README.md": (5, 5),
    "client/README.md": (1, 1),
    "docs/protocol.md": (19, 19),
}
MOST_NOT_RUN = 10  # 9 today: install/serve commands, and the Docker and Kubernetes blocks


def awaiting_a_mark(block: extract.Block) -> bool:
    if block.fence.path not in AWAITING_A_MARK or block.marks or block.language != "shell":
        return False
    section = AWAITING_A_MARK[block.fence.path]
    return (section is None or block.fence.heading == section) and block.code.lstrip().startswith(("docker", "kubectl"))


def collect():
    runnable, files = {}, {}
    for path in extract.documents():
        blocks, fences = extract.blocks(path)
        runnable[path] = [b for b in blocks if not awaiting_a_mark(b)]
        files[path] = fences
    return runnable, files


RUNNABLE, FILES = collect()
CHAINS = {path: extract.chains(blocks) for path, blocks in RUNNABLE.items()}
RUN = [block for chains in CHAINS.values() for chain in chains for block in chain]


class Examples:
    """Runs each chain once, on first asking, and keeps what its blocks printed."""

    def __init__(self, tmp: Path):
        self.tmp, self.ran, self.workdirs = tmp, {}, {}
        self.server = None

    def workdir(self, path: Path) -> Path:
        if path not in self.workdirs:
            self.workdirs[path] = self.tmp / path.relative_to(extract.ROOT).as_posix().replace("/", "_")
            self.workdirs[path].mkdir()
            write_files(FILES[path], self.workdirs[path])
        return self.workdirs[path]

    def result(self, block: extract.Block) -> Ran:
        if block.id not in self.ran:
            path = extract.ROOT / block.fence.path
            chain = next(chain for chain in CHAINS[path] if block in chain)
            workdir = self.workdir(path)
            if "server" in chain[0].marks:
                log = self.tmp / f"server-{block.fence.path.replace('/', '_')}-{block.fence.line}.log"
                with live_server(log, server_settings(chain[0])) as address:
                    ran = run_chain(chain, address, workdir)
            else:
                ran = run_chain(chain, self.server, workdir)
            self.ran.update({b.id: r for b, r in zip(chain, ran)})
        return self.ran[block.id]


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("documented-examples")
    with live_server(tmp / "server.log") as address:
        examples = Examples(tmp)
        examples.server = address
        yield examples


@pytest.mark.parametrize("block", RUN, ids=lambda block: block.id)
def test_documented_example(block, examples):
    ran = examples.result(block)
    assert ran.error is None, f"{block.id} failed: {ran.error}"
    commands = extract.transcript(block)
    if commands is None:
        shown = [(block.id, block.output)]
    else:
        shown = [(f"{block.fence.path}:{command.line}", command.shown) for command in commands]
    assert len(ran.printed) == len(shown)
    for (where, expected), printed in zip(shown, ran.printed):
        if expected is not None:
            assert same_output(expected, printed), (
                f"{where} prints something else than its document shows:\n{difference(expected, printed)}"
            )


@pytest.mark.parametrize("document", sorted(MINIMUM))
def test_each_document_has_its_examples(document):
    blocks = [b for b in RUNNABLE[extract.ROOT / document] if "not-run" not in b.marks]
    runnable, with_output = MINIMUM[document]
    assert len(blocks) >= runnable, [b.id for b in blocks]
    shown = [b for b in blocks if b.output is not None or any(c.shown for c in extract.transcript(b) or [])]
    assert len(shown) >= with_output, [b.id for b in shown]


def test_not_run_marks_are_few():
    marked = [b.id for blocks in RUNNABLE.values() for b in blocks if "not-run" in b.marks]
    assert len(marked) <= MOST_NOT_RUN, marked


def test_blocks_awaiting_a_mark_are_still_there():
    waiting = set()
    for path in extract.documents():
        waiting |= {b.fence.path for b in extract.blocks(path)[0] if awaiting_a_mark(b)}
    assert waiting == set(AWAITING_A_MARK), f"delete {set(AWAITING_A_MARK) - waiting} from AWAITING_A_MARK"


def test_marked_files_are_written_and_used():
    for path, fences in FILES.items():
        for fence in fences:
            name = fence.marks["file"]
            assert any(name in b.code for b in RUNNABLE[path]), f"{fence.id}: no example uses {name}"
            if name.endswith(".json"):
                json.loads(fence.text)
