"""A Triton model configuration, as far as gradserve reads one: `config.pbtxt` (protobuf text
format) or its JSON form (a load request's `parameters.config`, or `config.json`).

Read without Triton's schema: the text is parsed into nested dicts (a field given twice becomes
a list). gradserve reads `name`, `default_model_filename` and `parameters` (Triton's map of
`{key: {string_value: ...}}`; `parameter_gradients: "true"` serves an ONNX model's floating
initializers as parameters whose gradients can be asked for); the rest (inputs, outputs,
batching, instance groups) describes what the model itself says, and is ignored.
"""

from __future__ import annotations

import re

import orjson

from wire.errors import GraphError

TOKEN = re.compile(
    r"""\s*(?:(\#[^\n]*)|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|([{}\[\]<>:,;])|([A-Za-z0-9_.+\-]+))""", re.S
)
MAX_CONFIG_BYTES = 64 * 2**10
MAX_NESTING = 32


def _tokens(text: str, field: str) -> list:
    out, pos = [], 0
    while pos < len(text):
        match = TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise GraphError(f"config.pbtxt: cannot read it at character {pos}", field=field)
        pos = match.end()
        comment, string, punct, word = match.groups()
        if comment is not None:
            continue
        if string is not None:
            out.append(("str", string[1:-1].encode().decode("unicode_escape")))
        elif punct is not None:
            out.append(("punct", punct))
        elif word is not None:
            out.append(("word", word))
    return out


def _scalar(word: str):
    if word in ("true", "True"):
        return True
    if word in ("false", "False"):
        return False
    try:
        return int(word)
    except ValueError:
        try:
            return float(word)
        except ValueError:
            return word  # an enum value


def parse_pbtxt(text: str, field: str = "config.pbtxt") -> dict:
    """Protobuf text format as nested dicts (repeated fields as lists), without a schema."""
    if len(text) > MAX_CONFIG_BYTES:
        raise GraphError(f"{field} is over {MAX_CONFIG_BYTES} bytes", field=field)
    tokens = _tokens(text, field)
    pos = 0

    def message(closing, depth):
        nonlocal pos
        if depth > MAX_NESTING:
            raise GraphError(f"{field} is nested too deeply", field=field)
        out = {}
        while pos < len(tokens):
            kind, value = tokens[pos]
            if kind == "punct" and value == closing:
                pos += 1
                return out
            if kind == "punct" and value in ",;":
                pos += 1
                continue
            if kind != "word":
                raise GraphError(f"{field}: expected a field name, got {value!r}", field=field)
            pos += 1
            if pos < len(tokens) and tokens[pos] == ("punct", ":"):
                pos += 1
            item = entry(depth)
            existing = out.get(value)
            if existing is None:
                out[value] = item
            elif isinstance(existing, list) and not isinstance(item, list):
                existing.append(item)
            else:
                out[value] = [existing, item]
        if closing is not None:
            raise GraphError(f"{field}: a message is not closed", field=field)
        return out

    def entry(depth):
        nonlocal pos
        if pos >= len(tokens):
            raise GraphError(f"{field}: a field has no value", field=field)
        kind, value = tokens[pos]
        pos += 1
        if kind == "punct" and value in "{<":
            return message("}" if value == "{" else ">", depth + 1)
        if kind == "punct" and value == "[":
            items = []
            while pos < len(tokens) and tokens[pos] != ("punct", "]"):
                if tokens[pos] == ("punct", ","):
                    pos += 1
                    continue
                items.append(entry(depth + 1))
            if pos >= len(tokens):
                raise GraphError(f"{field}: a list is not closed", field=field)
            pos += 1
            return items
        if kind == "str":
            return value
        if kind == "word":
            return _scalar(value)
        raise GraphError(f"{field}: unexpected {value!r}", field=field)

    return message(None, 0)


def parse_json(text, field: str) -> dict:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        raise GraphError(f"{field} must be the model configuration's JSON (a string or an object)", field=field)
    if not text.strip():
        return {}
    try:
        config = orjson.loads(text)
    except orjson.JSONDecodeError as err:
        raise GraphError(f"{field} is not valid JSON: {err}", field=field) from None
    if not isinstance(config, dict):
        raise GraphError(f"{field} must be a JSON object (a Triton model configuration)", field=field)
    return config


def parameter(config: dict, key: str, field: str):
    """A Triton config parameter's string value (`parameters {key: "k" value {string_value: "v"}}`
    in text, `{"parameters": {"k": {"string_value": "v"}}}` in JSON), or None."""
    params = config.get("parameters") or {}
    entries = params if isinstance(params, list) else [params]
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if "key" in entry and entry.get("key") == key:  # text format: a map entry {key, value}
            value = entry.get("value")
        elif key in entry:  # JSON: the map itself
            value = entry[key]
        else:
            continue
        if isinstance(value, dict):
            value = value.get("string_value")
        return value if isinstance(value, (str, bool)) else _invalid(key, field)
    return None


def _invalid(key, field):
    raise GraphError(f"{field}: parameter {key!r} must be a string value", field=field)


def flag(config: dict, key: str, field: str) -> bool:
    value = parameter(config, key, field)
    if value is None or isinstance(value, bool):
        return bool(value)
    if value.strip().lower() in ("true", "1", "yes"):
        return True
    if value.strip().lower() in ("false", "0", "no", ""):
        return False
    raise GraphError(f'{field}: parameter {key!r} must be "true" or "false", got {value!r}', field=field)
