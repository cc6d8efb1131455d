"""`cw zoo list` and `cw zoo export`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from cw.cli.app import app, console, print_json
from cw.errors import OutputExistsError, UsageError

zoo_app = typer.Typer(help="ONNX models generated from code (seeded random weights, no downloads).",
                      no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("list")
def zoo_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")):
    """List the zoo's models.

    Example: [bold]cw zoo list[/]
    """
    import model_zoo

    rows = [{"name": e.name, "input": list(e.input_shape), "input_dtype": e.input_dtype,
             "description": e.description,
             "published_mb": e.published_mb, "published_source": e.published_source}
            for e in model_zoo.MODELS.values()]
    if as_json:
        print_json(rows)
        return
    table = Table(title="cw model zoo (batch dimension N is symbolic by default)")
    for col in ("name", "input", "published weights", "description"):
        table.add_column(col)
    for r in rows:
        shape = "N×" + "×".join(map(str, r["input"])) + (
            f" {r['input_dtype']}" if r["input_dtype"] != "float32" else "")
        mb = f"{r['published_mb']} MB" if r["published_mb"] else "-"
        table.add_row(r["name"], shape, mb, r["description"])
    console().print(table)


def parse_batch(text: str) -> int | None:
    if text == "dynamic":
        return None
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise UsageError(f"invalid --batch '{text}'", "use a positive integer or 'dynamic'")


@zoo_app.command("export")
def zoo_export(
    name: str = typer.Argument(..., help="Zoo model name (see `cw zoo list`)."),
    output: Path = typer.Option(..., "-o", "--output", help="ONNX file to write."),
    batch: str = typer.Option("dynamic", "--batch", help="Fixed batch size, or 'dynamic'."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
):
    """Write a zoo model as ONNX. The same name gives a byte-identical file on any machine.

    Example: [bold]cw zoo export resnet50 -o r50.onnx[/]
    """
    import model_zoo

    model_zoo.get(name)
    fixed = parse_batch(batch)
    if output.exists() and not force:
        raise OutputExistsError(f"output {output} already exists", "pass --force to overwrite")
    size = model_zoo.export(name, output, fixed)
    console().print(f"wrote {output} ({size / 1e6:.1f} MB, batch "
                    f"{'N (symbolic)' if fixed is None else fixed})")
