"""The reference docs name what the code has: every telemetry column (in order, with its
type), every message tag and field, every status, every metric. A column or field added
without its line in the docs fails here."""

import re
import typing
from pathlib import Path

import pytest

from cw.serve import protocol as p
from cw.serve.metrics import Metrics
from cw.serve.telemetry import ACTION_COLUMNS, REQUEST_COLUMNS, ActionRow, RequestRow

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _tables(text: str) -> list[list[list[str]]]:
    """Markdown tables: rows of cells, header and rule left out."""
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif rows:
            tables.append([r for r in rows[2:]])
            rows = []
    return tables


@pytest.mark.parametrize("row_type,columns", [(RequestRow, REQUEST_COLUMNS),
                                              (ActionRow, ACTION_COLUMNS)])
def test_telemetry_columns_are_documented_in_order_with_their_types(row_type, columns):
    tables = [t for t in _tables((DOCS / "telemetry.md").read_text())
              if t and t[0][0] == f"`{columns[0]}`" and len(t) > 5]
    (table,) = [t for t in tables if [r[0].strip("`") for r in t] == columns] or [None]
    assert table is not None, f"docs/telemetry.md has no table of exactly {columns}"
    for cells in table:
        assert len(cells) == 3, f"a row with {len(cells)} cells (a '|' in the text?): {cells}"
        name, kind = cells[0].strip("`"), cells[1]
        assert kind == row_type.__annotations__[name], (name, kind)


def _tagged(union) -> list:
    return list(typing.get_args(union))


def _section(text: str, heading: str) -> str:
    (section,) = [s for s in re.split(r"\n(?=## )", text) if heading in s.splitlines()[0]]
    return section


@pytest.mark.parametrize("union,heading", [(p.ToWorker, "(`ToWorker`)"),
                                           (p.FromWorker, "(`FromWorker`)"),
                                           (p.FromClient, "Client ↔ controller"),
                                           (p.ToClient, "Client ↔ controller")],
                         ids=["ToWorker", "FromWorker", "FromClient", "ToClient"])
def test_every_message_and_field_is_in_the_protocol_doc(union, heading):
    text = _section((DOCS / "protocol.md").read_text(), heading)
    rows = {cells[0]: " | ".join(cells[1:]) for table in _tables(text) for cells in table}
    # the fields every action has are said once, above the actions' table
    common = re.search(r"Every action has (.*?)\n\n", text, re.S)
    common = common.group(1) if common else ""
    for message in _tagged(union):
        tag = message.__struct_config__.tag
        row = rows.get(f"`{tag}`")
        assert row is not None, f"docs/protocol.md has no row for `{tag}`"
        said = row + (common if message in (p.Load, p.Unload, p.Infer) else "")
        missing = [f for f in message.__struct_fields__ if f"`{f}`" not in said]
        assert not missing, f"`{tag}`: fields {missing} are not described"


@pytest.mark.parametrize("enum", [p.Status, p.RequestStatus])
def test_every_status_is_in_the_protocol_doc(enum):
    text = (DOCS / "protocol.md").read_text()
    assert [s.name for s in enum if f"`{s.name}`" not in text] == []


def test_every_metric_is_in_the_telemetry_doc():
    m = Metrics("clockwork")
    m.request("OK", 1_000_000, True)
    m.action("infer", "OK")
    m.worker_clock("w", 1, 2, 3)
    m.gauges(0, {"1/0": 0.5}, {"1/0": 1}, 1.0, 1, {"w": (3_000_000, 2_000_000)})
    names = {re.match(r"[a-z_]+", line).group(0) for line in m.render().splitlines()
             if line and not line.startswith("#")}
    names = {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}
    assert len(names) > 15 and "cw_worker_clock_rtt_seconds" in names and \
        "cw_worker_infer_slack_seconds" in names
    text = (DOCS / "telemetry.md").read_text()
    documented = set(re.findall(r"`(cw_[a-z_]+)", text))
    documented |= {f"cw_worker_clock_{k}_seconds" for k in ("estimate", "rtt")
                   if "..._" + k + "_seconds" in text}
    assert sorted(names - documented) == []


def test_every_summary_key_of_a_simulated_replay_is_documented(summary_keys_documented,
                                                                tmp_path):
    from cw.replay.runner import ReplayConfig, replay

    summary = replay(ReplayConfig(duration_s=5, target_rate=200, out=tmp_path / "out"))
    assert len(summary_keys_documented) > 40
    assert sorted(set(summary) - summary_keys_documented) == []


def test_every_bundle_and_profile_field_is_in_the_bundle_doc():
    import msgspec

    from cw import bundle as b
    from cw.profile import schema as s

    text = (DOCS / "bundle.md").read_text()
    sections = {"manifest": _section(text, "manifest.json"),
                "profile": _section(text, "profile.json")}
    checked = 0
    for where, structs in (("manifest", [b.Manifest, b.Target, b.Source, b.TensorSpec,
                                         b.BatchKernel, b.Weights, b.WeightPage, b.WeightTensor]),
                           ("profile", [s.Profile, s.DeviceInfo, s.LoadProfile, s.BatchProfile])):
        for struct in structs:
            assert issubclass(struct, msgspec.Struct)
            for field in struct.__struct_fields__:
                checked += 1
                said = f"`{field}`" in sections[where] or f"`{field}[]`" in sections[where]
                assert said, f"{struct.__name__}.{field} is not in docs/bundle.md ({where})"
    assert checked > 50


def test_the_benchmarks_contents_list_every_section_with_its_anchor():
    """docs/benchmarks.md runs to thousands of lines: its contents list must name each section
    (a new one added without its line fails here) and link it by GitHub's anchor."""
    text = (DOCS / "benchmarks.md").read_text()
    sections = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")][1:]
    contents = re.findall(r"^- \[(.+)\]\(#([^)]+)\)$",
                          text.split("Contents", 1)[1].split("\n## ", 1)[0], re.M)

    def anchor(heading: str) -> str:  # GitHub's: lower case, punctuation dropped, '-' for ' '
        return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")

    assert [title for title, _ in contents] == sections
    assert all(link == anchor(title) for title, link in contents)
