"""What every command does the same way: JSON or text on stdout, notes on stderr, the exit when nothing fits."""
from __future__ import annotations

import click


def emit(data: dict, text_fn, as_json: bool) -> None:
    """The documented JSON object, or the text rendered from the same dict, on stdout."""
    from .. import render
    click.echo(render.to_json(data) if as_json else text_fn(data))


def notes(lines) -> None:
    """Remarks for a person, on stderr, so stdout stays data."""
    for line in lines:
        click.echo(f"note: {line}", err=True)


def exit_if_nothing_fits(planned: dict | None) -> None:
    """Called after the whole table is shown (each strategy with how much it is short): one line, exit 1."""
    from ..errors import DoesNotFit
    if planned and planned["recommendation"]["strategy"] is None:
        raise DoesNotFit(planned["recommendation"]["reasons"][0])
