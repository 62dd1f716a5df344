"""Does what an example printed match what its document shows?

Both sides go through the same `VOLATILE` normalisations, a short reviewed list of what
legitimately differs between runs or machines; then JSON values (a whole output, or a line that
starts with one) are compared as data, floats within `REL_TOL`, and every other line as text.
"""

from __future__ import annotations

import difflib
import json
import math
import re

REL_TOL, ABS_TOL = 1e-6, 1e-12

# (pattern, replacement, why it varies). Add an entry only with its reason.
VOLATILE: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"\b0x(?:[0-9a-fA-F]{4,}|\.\.\.)"), "0x…", "object addresses in reprs"),
    (re.compile(r'("tape"\s*:\s*)"[0-9a-f]{32}"'), r'\1"<tape id>"', "tape ids are random tokens"),
    (re.compile(r"^date: .*\n", re.MULTILINE | re.IGNORECASE), "", "the HTTP Date header"),
    (
        re.compile(r'("request_id"\s*:\s*)"[0-9a-f]{32}"|(^x-request-id: )[0-9a-f]{32}$', re.MULTILINE | re.IGNORECASE),
        lambda m: (m.group(1) + '"<request id>"') if m.group(1) else m.group(2) + "<request id>",
        "request ids the server generates (uuid4 hex) where the caller sent none",
    ),
    (
        re.compile(r'("version"\s*:\s*)"\d+\.\d+\.\d+[^"]*"'),
        r'\1"<release>"',
        'the release version in /info and /v2 (graph versions are 1, "1.0" and "1.1": kept)',
    ),
    (
        re.compile(r'("max_concurrency"\s*:\s*)\d+'),
        r"\1<cpus>",
        "its default is the CPUs this process may use, at most 4",
    ),
]


def normalise(text: str) -> str:
    text = text.replace("\r\n", "\n")
    for pattern, replacement, _ in VOLATILE:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def same_data(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_data(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_data(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def split_json(line: str):
    """(the JSON value a line starts with, the rest of the line), or None when it starts with none."""
    if not line.lstrip().startswith(("{", "[")):
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(line.lstrip())
    except json.JSONDecodeError:
        return None
    return value, line.lstrip()[end:].strip()


def same_line(shown: str, printed: str) -> bool:
    a, b = split_json(shown), split_json(printed)
    if a is None or b is None:
        return shown == printed
    return same_data(a[0], b[0]) and a[1] == b[1]


def same_output(shown: str, printed: str) -> bool:
    shown, printed = normalise(shown), normalise(printed)
    try:
        return same_data(json.loads(shown), json.loads(printed))
    except json.JSONDecodeError:
        pass
    shown_lines, printed_lines = shown.splitlines(), printed.splitlines()
    return len(shown_lines) == len(printed_lines) and all(map(same_line, shown_lines, printed_lines))


def difference(shown: str, printed: str) -> str:
    """A diff of the normalised texts, for a failure message."""
    lines = difflib.unified_diff(
        normalise(shown).splitlines(), normalise(printed).splitlines(), "shown", "printed", lineterm=""
    )
    return "\n".join(lines)
