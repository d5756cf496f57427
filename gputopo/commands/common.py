"""What every command does the same way: JSON or text on stdout, notes on stderr, the exit when nothing fits."""
from __future__ import annotations

import sys

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
    """The whole table is shown first (each strategy with how much it is short); then one line and exit 1."""
    from ..errors import DoesNotFit
    if planned and planned["recommendation"]["strategy"] is None:
        click.echo(f"Error: {planned['recommendation']['reasons'][0]}", err=True)
        sys.exit(DoesNotFit.exit_code)
