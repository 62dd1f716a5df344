"""The conventions test_documented_examples.py relies on: what the extractor finds in a page, what
the comparison accepts and refuses, and how chains run (no server needed)."""

from __future__ import annotations

import textwrap

import pytest

from tests.docs import extract
from tests.docs.compare import same_output
from tests.docs.run import run_chain

PAGE = textwrap.dedent(
    """\
    # Title

    ```python
    x = 1
    print(x + 1)
    ```
    ```
    2
    ```

    A paragraph of two lines that is not
    an output lead:

    ```json
    {"not": "an output"}
    ```

    <!-- continues: previous -->
    ```python
    print(x)
    ```

    Its output:

    ```text
    1
    ```

    ## Shell

    <!-- file: body.json -->
    ```json
    {"a": 1}
    ```

    ```sh
    $ A=5
    $ echo $A \\
        and more
    5 and more
    $ cat body.json
    {"a": 1}
    ```

    <!-- not-run: needs a Docker engine -->
    ```sh
    docker compose up
    ```

    <!-- continues: previous -->
    ```sh
    echo "$A again"
    ```
    ```text
    5 again
    ```
    """
)


@pytest.fixture
def page(tmp_path):
    path = tmp_path / "page.md"
    path.write_text(PAGE)
    return path


def test_the_extractor_finds_blocks_outputs_marks_and_files(page):
    runnable, files = extract.blocks(page, root=page.parent)
    assert [(b.fence.line, b.language, b.output) for b in runnable] == [
        (3, "python", "2\n"),
        (19, "python", "1\n"),
        (36, "shell", None),
        (46, "shell", None),
        (51, "shell", "5 again\n"),
    ]
    assert runnable[1].marks == {"continues": "previous"} and runnable[3].marks == {"not-run": "needs a Docker engine"}
    assert runnable[2].fence.heading == "Shell" and runnable[0].id == "page.md:3"
    assert [(f.marks["file"], f.text) for f in files] == [("body.json", '{"a": 1}\n')]
    chains = extract.chains(runnable)
    assert [[b.fence.line for b in chain] for chain in chains] == [[3, 19], [36, 51]]


def test_a_transcript_splits_into_commands_and_what_each_prints(page):
    runnable, _ = extract.blocks(page, root=page.parent)
    commands = extract.transcript(runnable[2])
    assert [(c.text, c.shown, c.line) for c in commands] == [
        ("A=5", "", 37),
        ("echo $A \\\n    and more", "5 and more\n", 38),
        ("cat body.json", '{"a": 1}\n', 41),
    ]
    assert extract.transcript(runnable[4]) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- not_run: typo -->\n```sh\nls\n```\n", "unknown mark"),
        ("<!-- not-run -->\n```sh\nls\n```\n", "needs a value"),
        ("```sh\nls\n", "never closed"),
    ],
)
def test_bad_marks_and_fences_are_refused(tmp_path, text, message):
    path = tmp_path / "bad.md"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        extract.blocks(path, root=tmp_path)


def test_a_continuation_needs_a_block_to_continue(tmp_path):
    path = tmp_path / "bad.md"
    path.write_text("```sh\nls\n```\n\n<!-- continues: previous -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="continues no earlier python block"):
        extract.chains(extract.blocks(path, root=tmp_path)[0])


@pytest.mark.parametrize(
    ("shown", "printed"),
    [
        ('{"data": [9.200001], "id": "r1"}', '{"id":"r1","data":[9.2000011]}'),
        ("<AddBackward0 object at 0x...> ()", "<AddBackward0 object at 0x7f2e7eddc7c0> ()"),
        (
            '{"tape":"7e5ace07f3844606ac95d118bad49f9a"} HTTP 200',
            '{"tape": "0123456789abcdef0123456789abcdef"} HTTP 200',
        ),
        (
            "HTTP/1.1 200 OK\ncontent-length: 2\n",
            "HTTP/1.1 200 OK\r\ndate: Wed, 25 Nov 2026 07:50:21 GMT\r\ncontent-length: 2\r\n",
        ),
        ('{"version":"0.1.0","max_concurrency":4}', '{"version":"0.2.0rc1","max_concurrency":2}'),
        ('{"data": ["NaN", 1]}', '{"data": ["NaN", 1.0]}'),
    ],
)
def test_outputs_that_match(shown, printed):
    assert same_output(shown, printed)


@pytest.mark.parametrize(
    ("shown", "printed"),
    [
        ('{"data": [9.2]}', '{"data": [9.21]}'),
        ('{"id": "r1"}', '{"id": "r1", "plan": "a1e4654969ac97f71b7df038ecddc5e8"}'),
        ('{"data": [true]}', '{"data": [1]}'),
        ('{"x": 1} HTTP 200', '{"x": 1} HTTP 422'),
        ("Variable([  6.,   0., -18.])", "Variable([  6.,   0., -19.])"),
        ("step 0\nstep 50", "step 0"),
        ('{"graph_format_version":"1.1"}', '{"graph_format_version":"1.0"}'),
        ('{"plan":"a1e4654969ac97f71b7df038ecddc5e8"}', '{"plan":"b08b91e80a80c69a923b878504540999"}'),
    ],
)
def test_outputs_that_differ(shown, printed):
    assert not same_output(shown, printed)


def test_a_python_chain_shares_one_interpreter_and_names_the_failing_line(page, tmp_path):
    runnable, _ = extract.blocks(page, root=page.parent)
    ran = run_chain(extract.chains(runnable)[0], "127.0.0.1:1", tmp_path)
    assert [(r.printed, r.error) for r in ran] == [(["2\n"], None), (["1\n"], None)]

    broken = extract.Block(extract.Fence("page.md", 7, "python", "print('before')\nundefined_name\n", ""))
    (failed,) = run_chain([broken], "127.0.0.1:1", tmp_path)
    assert failed.printed == ["before\n"]
    assert 'File "page.md", line 9' in failed.error and "NameError" in failed.error


def test_a_shell_chain_keeps_its_session_and_stops_at_a_failing_command(page, tmp_path):
    runnable, files = extract.blocks(page, root=page.parent)
    (tmp_path / "body.json").write_text(files[0].text)
    ran = run_chain(extract.chains(runnable)[1], "127.0.0.1:1", tmp_path)
    assert [(r.printed, r.error) for r in ran] == [(["", "5 and more\n", '{"a": 1}\n'], None), (["5 again\n"], None)]

    broken = extract.Block(extract.Fence("page.md", 1, "sh", "$ echo one\n$ false\n$ echo never\n", ""))
    (failed,) = run_chain([broken], "127.0.0.1:1", tmp_path)
    assert failed.printed == ["one\n", ""] and failed.error.startswith("exit status 1")


def test_documented_addresses_become_the_live_one_and_back(tmp_path):
    block = extract.Block(extract.Fence("page.md", 1, "sh", "$ echo http://127.0.0.1:8000/x localhost:8001\n", ""))
    (ran,) = run_chain([block], "127.0.0.1:45678", tmp_path)
    assert ran.printed == ["http://127.0.0.1:8000/x 127.0.0.1:8000\n"]
