"""Telemetry as numpy columns, for summaries and reports.

A replay of an hour has millions of request and action rows. The summary and the report's
series need a dozen columns of them; a column is built once, when first asked for, either from
rows in memory (a live replay, the Python simulator, `cw report` reading CSVs) or straight from
the compiled simulator's int64 output, which never becomes row objects at all.
"""

from __future__ import annotations

import numpy as np

from cw.serve.telemetry import ActionRow, RequestRow

_DTYPE = {"int": np.int64, "bool": bool, "str": object}


class Columns:
    """One kind of telemetry (requests or actions), column by column."""

    def __init__(self, row_type, count: int, rows: list | None = None,
                 tables: list[np.ndarray] | None = None, codes: dict | None = None):
        """From `rows`, or from `tables` (chunks of one int64 row per telemetry row, in
        `row_type`'s field order) whose text columns hold indices into `codes[name]`. The
        chunks are never joined into one table: a column at a time is a sixteenth of the
        memory, and a run of millions of rows needs a dozen columns."""
        self.row_type, self.count = row_type, count
        self._rows, self._tables, self._codes = rows, tables, codes or {}
        self._fields = list(row_type.__struct_fields__)
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
            if self._tables is not None:
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
            if self._tables is not None:
                names = self._codes[name]
                raw = self._raw(name)
                mask = raw == names.index(value) if value in names else np.zeros(self.count, bool)
            else:
                mask = np.array(_getter(name, value)(self._rows), dtype=bool)
            self._cache[key] = mask
        return mask

    def _raw(self, name: str) -> np.ndarray:
        j = self._fields.index(name)
        if not self._tables:
            return np.zeros(0, np.int64)
        return np.concatenate([t[:, j] for t in self._tables])


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


def requests_of(requests) -> Columns:
    return requests if isinstance(requests, Columns) else Columns.of_rows(requests, RequestRow)


def actions_of(actions) -> Columns:
    return actions if isinstance(actions, Columns) else Columns.of_rows(actions, ActionRow)
