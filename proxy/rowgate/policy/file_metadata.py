"""What a read of a protected table may learn from the files under it (issue 21 item 8).

A file source fills some columns and functions in from the file or from a row's place in
it, not from the row: `_metadata.row_index` is the row's position in its file, so two
allowed rows at positions 0 and 10 say that nine hidden rows lie between them;
`_metadata.file_size` and the block offsets measure the whole file, hidden rows included.
Those describe hidden rows even when computed on allowed ones, so for reads of protected
tables only what describes the allowed row's own file is allowed, as data here; everything
else (any field or metadata column not listed, the whole `_metadata` struct, metadata
columns of other sources such as `_pos` or `_file`) is refused by the second opinion on
Spark's analysed plan (proxy/rowgate/rewrite/plan/file_metadata_reads.py).

>>> sorted(ALLOWED_FIELDS["_metadata"])
['file_modification_time', 'file_name', 'file_path']
>>> "input_file_block_start" in REFUSED_FUNCTIONS
True
"""

from __future__ import annotations

# metadata column -> field -> why it describes only the allowed row's own file
ALLOWED_FIELDS: dict[str, dict[str, str]] = {
    "_metadata": {
        "file_path": "the path of the file holding the allowed row (input_file_name() says the same)",
        "file_name": "the name of that file",
        "file_modification_time": "when that file was written",
    },
}

# Known fields that are refused, with the reason (messages and the README; anything not in
# ALLOWED_FIELDS is refused whether or not it is listed here).
REFUSED_FIELDS: dict[str, str] = {
    "_metadata.row_index": "the row's position in its file counts the hidden rows before it",
    "_metadata.file_size": "the size of the whole file measures its hidden rows too",
    "_metadata.file_block_start": "the offset of the scanned block measures the rows before it",
    "_metadata.file_block_length": "the length of the scanned block measures its hidden rows too",
}

# Functions a scan fills in from the file split (Spark prints them as `name()`); refused in
# any plan that reads a protected table. `input_file_name()` is allowed (the file's path).
REFUSED_FUNCTIONS: dict[str, str] = {
    "input_file_block_start": "the offset of the scanned block measures the rows before it",
    "input_file_block_length": "the length of the scanned block measures its hidden rows too",
}
