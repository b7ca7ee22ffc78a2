"""A training row and a benchmark body as the index stores them (shown, as as_read shows a file), and read back.

A row is the runs frame's values in its order (report/columns.py), its loss curve apart as packed doubles; a
body, the few fields report/index.py keeps of a result. It is stored as shown (as_read; its JSON texts as what
they say, columns.Column.json_text) and sealed; only a row this user sealed is read back (index._kept).
"""

import json

import msgspec

from scalelab.redaction import as_read
from scalelab.report.columns import JSON_TEXTS, NAMES, Curve


def shown(body: dict) -> dict:
    """A light body as the report shows it (as_read, as a file is shown): what a sealed row stores."""
    row = body.get("_row")
    fields = _shown_fields({k: v for k, v in body.items() if k != "_row"})
    return fields if row is None else {**fields, "_row": _shown_row(list(row))}


def _shown_fields(body: dict) -> dict:
    """A body's fields but its row as as_read shows them; its group key (JSON text) as _shown_json does."""
    fields = as_read(body)
    if "_group_key" in body:
        fields["_group_key"] = _shown_json(body["_group_key"])
    return fields


def _shown_json(text):
    """A JSON text a row holds (results.group_key, columns.Column.json_text: made from a result as_read showed), as
    as_read shows what it says: redacting the text as text would take a field named like a secret for one
    (`"num_key_value_heads": 4` -> `<redacted>`: two workloads one group). ValueError where it is not the text of
    what as_read shows (a hand edit, another's row: its file is read again)."""
    if text == "":  # a run without a fingerprint
        return text
    try:
        if type(text) is str and json.dumps(as_read(json.loads(text)), sort_keys=True) == text:
            return text
    except (ValueError, RecursionError):
        pass
    raise ValueError("not a stored body")


def encode(body: dict) -> tuple:
    """(text, curve): the body as JSON, a training row as the list of its values; its loss curve apart, as packed
    doubles (columns.Curve: most of a row's bytes, and of the time a report takes to read 100,000 rows as JSON)."""
    row = body.get("_row")
    if row is None:
        return json.dumps(body, allow_nan=True, default=str), None
    curve = row[_CURVE] if isinstance(row[_CURVE], Curve) else None
    values = [curve is not None if i == _CURVE else v for i, v in enumerate(row)]  # true: the curve is beside
    return json.dumps({**body, "_row": values}, allow_nan=True, default=str), None if curve is None else curve.packed


def decode(text, curve, seen: dict) -> dict:
    """A stored body this user sealed (stored as shown: not walked by as_read again); a row's tuples (bucket sizes)
    come back as run_row made them, its loss curve as the Curve given (read when used; its bytes checked by
    index._kept and _Beside). seen: the texts met so far, one object each across 100,000 rows, as as_read's memory
    of them gives (without it a report's peak was 1,023 MiB, not 870). ValueError where it is not a body this
    module wrote (the file is read again)."""
    try:
        body = loads(text)
        row = body.pop("_row", None) if isinstance(body, dict) and body.get("kind") == "training" else None
        if type(body) is dict:
            body = {k: seen.setdefault(v, v) if (kind := type(v)) is str else v if kind is not list and kind is not
                    dict else _once(v, seen, list) for k, v in body.items()}
    except (TypeError, ValueError, RecursionError):
        raise ValueError("not a stored body") from None
    if not isinstance(body, dict) or not isinstance(body.get("run_id"), str) or body.get("kind") not in (
            "training", "allreduce") or (body["kind"] == "training") != (type(row) is list and len(row) == _WIDTH):
        raise ValueError("not a stored body")  # a row is the runs frame's values, one each, in its order
    if row is None:
        if curve is not None:
            raise ValueError("not a stored body")
        return body
    if row[_CURVE] is not (curve is not None):
        raise ValueError("not a stored body")  # a row says whether its curve is beside it (encode), never holds it
    row[_CURVE] = curve
    body["_row"] = tuple([seen.setdefault(v, v) if (kind := type(v)) is str else v if kind is not list and kind is not
                          dict else _once(v, seen, tuple) for v in row])  # inline, not a call per value: 6 million
    return body


def _once(value, seen: dict, listed):
    """A sealed value with its texts, and those of the lists and mappings it holds, each one object (seen); its list
    as `listed` (a row's: tuple, as run_row makes them)."""
    kind = type(value)
    if kind is str:
        return seen.setdefault(value, value)
    if kind is list:
        return listed([seen.setdefault(v, v) if type(v) is str else v for v in value])
    if kind is dict:
        return {k: seen.setdefault(v, v) if type(v) is str else v for k, v in value.items()}
    return value


def loads(text):
    """What json.loads gives: by msgspec where it reads the text (4 times as fast), else by json (a NaN a row may
    hold, a number past int64, a lone surrogate: what msgspec refuses)."""
    try:
        return _FAST.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(text)


_FAST = msgspec.json.Decoder()
_WIDTH, _CURVE = len(NAMES), NAMES.index("loss_curve")  # a row: the runs frame's values in its order
_JSON_AT = tuple(NAMES.index(name) for name in JSON_TEXTS)


def _shown_row(row: list) -> tuple:
    """A stored row as as_read shows it, its lists as tuples: a row holds values only (no keys: the runs frame's
    names are its order), so only they are walked (a 100,000-result report's largest cost)."""
    try:
        shown = [tuple(as_read(v)) if type(v) is list else as_read(v) if type(v) in (str, dict) else v
                 for v in row]  # a list, not a generator: 100,000 rows of 80 values
    except RecursionError:
        raise ValueError("not a stored body") from None
    for i in _JSON_AT:
        shown[i] = _shown_json(row[i])
    return tuple(shown)
