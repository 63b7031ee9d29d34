"""Reading a user's text file as UTF-8, with an error that says where it is not.

Python's own ``'utf-8' codec can't decode byte 0xe9 in position 132`` names neither the
file nor the line, and "position 132" is a byte offset nobody can find in an editor.
Every benchmark reader of text (TOFU / MUSE rows, template args, retain logs, edits,
WEAT word sets, probe data) goes through :func:`read_utf8`, so a Latin-1 file is one
line: file, line, column, the offending byte, and (for one-record-per-line files) the
0-based row, which is the ``index`` every ``value_by_index`` uses.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BOM = b"\xef\xbb\xbf"


class DataError(ValueError):
    """Bad or missing input data; the message names the file, row and field.

    Every benchmark's readers raise it (the CLI turns it into one ``evaldag: error:``
    line); it lives here, beside the reading every reader shares, so no plugin has to
    import another to raise or catch it.
    """


class NotUTF8(ValueError):
    """A text file that is not valid UTF-8; the message names file, line, column and byte."""


def where_not_utf8(data: bytes, at: int, reason: str, origin: str, *, rows: bool = False) -> str:
    """The message for the undecodable byte at offset ``at`` of ``data``.

    ``rows``: the file holds one record per non-blank line (JSON lines), so the 0-based
    row of the bad line is said too.
    """
    line_start = data.rfind(b"\n", 0, at) + 1
    line = data.count(b"\n", 0, at) + 1
    column = at - line_start + 1
    row = ""
    if rows:
        before = data[:line_start].split(b"\n")[:-1]
        row = f" (row {sum(1 for ln in before if ln.strip())}, 0-based)"
    return (f"{origin}: line {line}{row}, column {column}: byte 0x{data[at]:02x} is not UTF-8 "
            f"(byte offset {at}: {reason}); save the file as UTF-8")


def decode_utf8(data: bytes, origin: str, *, rows: bool = False) -> str:
    """``data`` as text; a leading byte-order mark is dropped, anything not UTF-8 is a :class:`NotUTF8`."""
    skip = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as e:  # offsets in the file, BOM included
        raise NotUTF8(where_not_utf8(data, e.start + skip, e.reason, origin, rows=rows)) from None


def read_utf8(path: str | Path, *, rows: bool = False) -> str:
    """The text of ``path`` (gunzipped when it ends in ``.gz``: lines are then the
    decompressed text's); see :func:`decode_utf8`."""
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return decode_utf8(data, str(path), rows=rows)


def json_lines(text: str, origin: str | Path) -> list:
    """One JSON value per non-blank line of ``text``; a bad line is a ``ValueError`` naming
    ``origin`` and the line (the probes' and the edits' JSON-lines files read alike)."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{origin}:{n}: not JSON ({e})") from None
    return rows
