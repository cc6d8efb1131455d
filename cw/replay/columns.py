"""Telemetry as numpy columns, for summaries and reports.

A replay of an hour has millions of request and action rows. The summary and the report's
series need a dozen columns of them; a column is built once, when first asked for, either from
rows in memory (a live replay, the Python simulator) or from chunks of narrow columns (the
compiled simulator's int64 output, and `cw report` reading CSVs), which never become row
objects at all.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import numpy as np

from cw.serve.telemetry import (ADDED_COLUMNS, ActionRow, RequestRow, bad_row, read_header,
                                row_parser)

_DTYPE = {"int": np.int64, "bool": bool, "str": object}
# Columns whose values are small (samples, batch sizes, worker and device indices) are kept as
# int32, flags as bools and text codes as int32: 78 bytes a request row instead of 128.
_SMALL_INTS = frozenset({"n", "batch_size", "worker", "gpu", "requests"})


def split_table(table: np.ndarray, row_type) -> dict[str, np.ndarray]:
    """One chunk of int64 rows (`row_type`'s field order, text as codes) as narrow columns."""
    chunk = {}
    for j, name in enumerate(row_type.__struct_fields__):
        col, kind = table[:, j], str(row_type.__annotations__[name])
        if kind == "bool":
            chunk[name] = col.astype(bool)
        elif kind == "str" or name in _SMALL_INTS:
            narrow = col.astype(np.int32)
            chunk[name] = narrow if np.array_equal(narrow, col) else col.copy()
        else:
            chunk[name] = col.copy()  # not a view: the table's memory can go
    return chunk


class Columns:
    """One kind of telemetry (requests or actions), column by column."""

    def __init__(self, row_type, count: int, rows: list | None = None,
                 chunks: list[dict[str, np.ndarray]] | None = None, codes: dict | None = None):
        """From `rows`, or from `chunks` (`split_table`'s columns of consecutive rows) whose
        text columns hold indices into `codes[name]`. A column is joined from its chunks when
        first asked for; the rest stay as they are (a run of millions of rows needs a dozen)."""
        self.row_type, self.count = row_type, count
        self._rows, self._chunks, self._codes = rows, chunks, codes or {}
        self._cache: dict = {}

    @classmethod
    def of_rows(cls, rows: list, row_type) -> Columns:
        return cls(row_type, len(rows), rows=rows)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._cache.get(name)
        if col is None:
            kind = str(self.row_type.__annotations__[name])
            if self._chunks is not None:
                raw = self._raw(name)
                if kind == "str":
                    col = np.array(self._codes[name], dtype=object)[raw]
                else:
                    col = raw.astype(_DTYPE[kind])
            else:
                col = np.array(_getter(name)(self._rows), dtype=_DTYPE[kind])
            self._cache[name] = col
        return col

    def equals(self, name: str, value: str) -> np.ndarray:
        """Mask of the rows whose text column `name` is `value`."""
        key = (name, value)
        mask = self._cache.get(key)
        if mask is None:
            if self._chunks is not None:
                names = self._codes[name]
                raw = self._raw(name)
                mask = raw == names.index(value) if value in names else np.zeros(self.count, bool)
            else:
                mask = np.array(_getter(name, value)(self._rows), dtype=bool)
            self._cache[key] = mask
        return mask

    def factorize(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Text column `name` as codes, and the text each code stands for (some may not
        occur: the compiled simulator names every model, whether it got requests or not)."""
        if self._chunks is not None:
            return self._raw(name).astype(np.intp), list(self._codes[name])
        names, codes = np.unique(np.array(_getter(name)(self._rows), dtype=str),
                                 return_inverse=True)
        return codes.astype(np.intp), names.tolist()

    def _raw(self, name: str) -> np.ndarray:
        if not self._chunks:
            return np.zeros(0, np.int64)
        return np.concatenate([c[name] for c in self._chunks])


_GETTERS: dict = {}


def _getter(name: str, value: str | None = None):
    """`[r.NAME for r in rows]` (or `[r.NAME == value ...]`) as a compiled comprehension: twice
    as fast as map(attrgetter) over millions of rows. `name` is a struct field, never input."""
    key = (name, value)
    fn = _GETTERS.get(key)
    if fn is None:
        body = f"r.{name}" if value is None else f"r.{name} == value"
        fn = _GETTERS[key] = eval(f"lambda rows, value=value: [{body} for r in rows]",  # noqa: S307
                                  {"value": value})
    return fn


_BOOL = {"True": 1, "true": 1, "1": 1, "False": 0, "false": 0, "0": 0}  # as _parse_bool
_LOADTXT_DTYPE = {"int": np.int64, "bool": object, "str": object}  # text as str objects


def read_columns(path: str | Path, row_type, chunk_rows: int = 1 << 15) -> Columns:
    """A telemetry CSV as Columns, parsed by numpy a chunk of lines at a time into columns
    (text as codes), never as row objects: `cw report` on a run of 6 million requests took
    5.4 GB and 90 s through `read_csv`. Same checks and error lines as `read_csv`."""
    fields = list(row_type.__struct_fields__)
    kinds = {c: str(row_type.__annotations__[c]) for c in fields}
    codes: dict[str, dict[str, int]] = {c: {} for c in fields if kinds[c] == "str"}
    chunks, line_no = [], 2
    with open(path, newline="") as f:
        first = f.readline()
        header = read_header(path, csv.reader([first] if first else []), row_type)
        present = [c for c in fields if c in header]
        usecols = [header.index(c) for c in present]
        dtype = np.dtype([(c, _LOADTXT_DTYPE[kinds[c]]) for c in present])
        while lines := list(itertools.islice(f, chunk_rows)):
            try:
                parsed = np.loadtxt(lines, dtype=dtype, delimiter=",", quotechar='"',
                                    usecols=usecols, comments=None, ndmin=1)
                chunks.append(split_table(_table(parsed, len(lines), fields, kinds, codes),
                                          row_type))
            except (ValueError, OverflowError) as e:
                raise _located(path, line_no, lines, header, row_type, e) from None
            line_no += len(lines)
    return Columns(row_type, line_no - 2, chunks=chunks,
                   codes={c: list(m) for c, m in codes.items()})


def _table(parsed, count: int, fields, kinds, codes) -> np.ndarray:
    if len(parsed) != count:  # a blank line: csv.reader gives an empty row, which read_csv refuses
        raise ValueError("an empty row")
    table = np.empty((count, len(fields)), np.int64)
    for j, name in enumerate(fields):
        if name not in parsed.dtype.names:  # a column older files lack
            value = ADDED_COLUMNS[name]
            table[:, j] = int(value) if kinds[name] == "int" else _BOOL[value]
            continue
        col = parsed[name]
        if kinds[name] == "int":
            table[:, j] = col
            continue
        text = col.tolist()
        if kinds[name] == "bool":
            odd = set(text).difference(_BOOL)
            if odd:
                raise ValueError(f"not a boolean: {odd.pop()!r}")
            table[:, j] = np.fromiter(map(_BOOL.__getitem__, text), np.int64, count)
        else:
            seen = codes[name]
            for value in set(text).difference(seen):
                seen[value] = len(seen)
            table[:, j] = np.fromiter(map(seen.__getitem__, text), np.int64, count)
    return table


def _located(path, first_line: int, lines: list[str], header, row_type, error: Exception):
    """The error line for a chunk numpy could not read: the first row `read_csv` would refuse,
    with its reason, else numpy's reason."""
    parse = row_parser(header, row_type)
    ints = [c for c in row_type.__struct_fields__ if row_type.__annotations__[c] == "int"]
    for k, rec in enumerate(csv.reader(lines)):
        try:
            row = parse(rec)
        except (ValueError, IndexError) as e:
            return bad_row(path, first_line + k, e)
        for name in ints:  # Python's ints have no bound, a column's have
            if not -2**63 <= getattr(row, name) < 2**63:
                return bad_row(path, first_line + k, f"{name} is beyond 64 bits")
    return bad_row(path, first_line, error)


def requests_of(requests) -> Columns:
    return requests if isinstance(requests, Columns) else Columns.of_rows(requests, RequestRow)


def actions_of(actions) -> Columns:
    return actions if isinstance(actions, Columns) else Columns.of_rows(actions, ActionRow)
