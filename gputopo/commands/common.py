"""What every command does the same way: JSON or text on stdout, notes on stderr, the exit when nothing fits."""
from __future__ import annotations

import click


class Command(click.Command):
    """A command that refuses an option given twice with different values (`--nccl-log a --nccl-log b`): click
    keeps the last without a word, and the first was meant as much. The same value twice is harmless."""

    def parse_args(self, ctx, args):
        names = {name: p for p in self.params if isinstance(p, click.Option) and not p.multiple and not p.count
                 for name in p.opts + p.secondary_opts}
        given: dict = {}
        i = 0
        while i < len(args) and args[i] != "--":
            name, eq, value = args[i].partition("=") if args[i].startswith("--") else (args[i][:2], "", args[i][2:])
            p = names.get(name)
            i += 1
            if p is None:
                continue
            if p.is_flag:
                value = name
            elif not eq and not value and i < len(args):
                value, i = args[i], i + 1
            given.setdefault(p, []).append(value)
        from ..options import one_value
        for p, values in given.items():
            if not one_value(p, values, ctx):   # 80GB and 80GiB, 4 and 04 are one value (docs/options.md)
                shown = ", ".join(dict.fromkeys(values))
                times = "twice" if len(values) == 2 else f"{len(values)} times"
                raise click.UsageError(f"{max(p.opts, key=len)} given {times} ({shown}): give it once", ctx)
        return super().parse_args(ctx, args)


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
