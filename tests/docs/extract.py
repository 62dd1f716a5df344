"""The fenced examples of the project's Markdown documents, and what each one promises.

A fence is ```` ```lang ```` at the start of a line. Shell (`sh`, `bash`, `shell`, `console`) and
`python` fences are *runnable*. A `json`, `text` or bare fence is the *output* of the runnable
fence before it when only blank lines, or one line of prose ending in "output:", separate them.
HTML comments on the lines right above a fence mark it (see `MARKS`). A shell fence whose lines
start with `$ ` is a *transcript*: each `$ ` line (continued by a trailing backslash) is a
command and the lines up to the next `$ ` line are what it prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SHELL = frozenset({"sh", "bash", "shell", "console"})
PYTHON = frozenset({"python"})
OUTPUT = frozenset({"json", "text", ""})
# The marks a runnable or file fence may carry, as <!-- name: value --> right above it.
MARKS = {
    "not-run": "the block is not executed; the value says why (a Docker engine, a package index...)",
    "continues": "'previous': run after the document's previous runnable block of the same language, "
    "in the same Python process or shell session",
    "file": "a NAME: the block's text is written to NAME in the document's working directory before any "
    "block of the document runs",
    "server": "the block's chain runs against a fresh server of its own, started with these "
    "GRADSERVE_NAME=value settings (space-separated)",
}
# Comments that other tests use to find a block; they are not marks.
FOREIGN_MARKS = frozenset({"oip-example"})

FENCE = re.compile(r"^(`{3,})([\w-]*)\s*$")
COMMENT = re.compile(r"^<!--\s*([\w-]+)\s*(?::\s*(.*?))?\s*-->\s*$")
HEADING = re.compile(r"^#{1,6}\s+(.*)$")
OUTPUT_LEAD = re.compile(r"^[^`#<|].*output:\s*$", re.IGNORECASE)


def documents(root: Path = ROOT) -> list[Path]:
    """The documents whose examples are tests: README.md, client/README.md and docs/*.md."""
    return [root / "README.md", root / "client" / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass
class Fence:
    path: str  # relative to the repository root
    line: int  # the opening fence's line, from 1
    lang: str
    text: str  # the lines inside the fence, each ending in a newline
    heading: str  # the nearest heading above it
    marks: dict[str, str] = field(default_factory=dict)
    gap: list[str] = field(default_factory=list)  # the lines between the previous fence and this one

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Block:
    """A runnable fence with the output shown after it (None when none is shown)."""

    fence: Fence
    output: str | None = None

    def __repr__(self) -> str:
        return f"Block({self.id})"

    @property
    def id(self) -> str:
        return self.fence.id

    @property
    def language(self) -> str:
        return "python" if self.fence.lang in PYTHON else "shell"

    @property
    def code(self) -> str:
        return self.fence.text

    @property
    def marks(self) -> dict[str, str]:
        return self.fence.marks


def fences(path: Path, root: Path = ROOT) -> list[Fence]:
    lines = path.read_text().splitlines(keepends=True)
    found, heading, start, gap_start = [], "", None, 0
    for number, line in enumerate(lines):
        match = FENCE.match(line.rstrip("\n"))
        if start is None:
            if heading_match := HEADING.match(line):
                heading = heading_match.group(1).strip()
            if match:
                start, ticks, lang = number, match.group(1), match.group(2)
        elif match and match.group(1) == ticks and not match.group(2):
            gap = [text.rstrip("\n") for text in lines[gap_start:start]]
            fence = Fence(
                path=path.relative_to(root).as_posix(),
                line=start + 1,
                lang=lang,
                text="".join(lines[start + 1 : number]),
                heading=heading,
                marks=marks_above(gap, f"{path.name}:{start + 1}"),
                gap=gap,
            )
            found.append(fence)
            start, gap_start = None, number + 1
    if start is not None:
        raise ValueError(f"{path}:{start + 1}: a fence that is never closed")
    return found


def marks_above(gap: list[str], where: str) -> dict[str, str]:
    """The <!-- name: value --> comments on the lines right above a fence."""
    marks = {}
    for line in reversed(gap):
        match = COMMENT.match(line)
        if not match:
            break
        name, value = match.group(1), (match.group(2) or "").strip()
        if name in FOREIGN_MARKS:
            continue
        if name not in MARKS:
            raise ValueError(f"{where}: unknown mark <!-- {name} -->; the marks are {sorted(MARKS)}")
        if not value:
            raise ValueError(f"{where}: the mark <!-- {name} --> needs a value: {MARKS[name]}")
        marks[name] = value
    return marks


def shows_output(fence: Fence) -> bool:
    """Is this fence the output of the fence before it?"""
    if fence.lang not in OUTPUT or fence.marks:
        return False
    prose = [line for line in fence.gap if line.strip()]
    return not prose or (len(prose) == 1 and bool(OUTPUT_LEAD.match(prose[0])))


def blocks(path: Path, root: Path = ROOT) -> tuple[list[Block], list[Fence]]:
    """(the runnable blocks, the fences marked as files) of one document, in document order."""
    runnable, files, previous = [], [], None
    for fence in fences(path, root):
        if fence.lang in SHELL | PYTHON:
            previous = Block(fence)
            runnable.append(previous)
            continue
        if "file" in fence.marks:
            files.append(fence)
        elif previous is not None and previous.output is None and shows_output(fence):
            previous.output = fence.text
        previous = None
    return runnable, files


def chains(runnable: list[Block]) -> list[list[Block]]:
    """The blocks to run together, in order: a block and the blocks that continue it."""
    result: list[list[Block]] = []
    last: dict[str, list[Block]] = {}
    for block in runnable:
        if "not-run" in block.marks:
            continue
        if block.marks.get("continues") is not None:
            if block.marks["continues"] != "previous":
                raise ValueError(f"{block.id}: write <!-- continues: previous -->")
            if block.language not in last:
                raise ValueError(f"{block.id}: continues no earlier {block.language} block of its document")
            if "server" in block.marks:
                raise ValueError(f"{block.id}: a continuing block runs on the server of the block it continues")
            last[block.language].append(block)
            continue
        chain = [block]
        result.append(chain)
        last[block.language] = chain
    return result


@dataclass
class Command:
    text: str  # what to run (continuation lines joined by the shell itself)
    shown: str  # the lines the document shows after it
    line: int  # its line in the document


def transcript(block: Block) -> list[Command] | None:
    """The commands of a shell transcript (`$ ` lines), or None for a plain script."""
    lines = block.code.splitlines()
    if not any(line.startswith("$ ") for line in lines):
        return None
    if not lines[0].startswith("$ "):
        raise ValueError(f"{block.id}: a transcript starts with a '$ ' line")
    commands: list[Command] = []
    continued = False
    for offset, line in enumerate(lines):
        if continued:
            commands[-1].text += "\n" + line
        elif line.startswith("$ "):
            commands.append(Command(line[2:], "", block.fence.line + 1 + offset))
        else:
            commands[-1].shown += line + "\n"
        continued = (continued or line.startswith("$ ")) and line.endswith("\\")
    return commands
