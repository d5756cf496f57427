"""What every command does the same way: JSON or text on stdout, notes on stderr, the exit when nothing fits, the
text's shape (--explain, --wide), and the next command a text answer names."""
from __future__ import annotations

import click

ARGS = "gputopo.args"   # ctx.meta: the command line as typed, for the next command an answer names


class Command(click.Command):
    """A command that refuses an option given twice with different values (`--nccl-log a --nccl-log b`): click
    keeps the last without a word, and the first was meant as much. The same value twice is harmless."""

    def parse_args(self, ctx, args):
        ctx.meta[ARGS] = list(args)
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


def explain_option(f):
    """--explain: the text says everything behind its answer (one flag, one meaning, in every command)."""
    return click.option("--explain", is_flag=True,
                        help="Show every figure's source and assumption, the reasons in words, and every note.")(f)


def wide_option(f):
    """--wide: tables and prose at full width, as gputopo printed them before they fit 100 columns."""
    return click.option("--wide", is_flag=True,
                        help="Print tables and text at full width, a line each (the default fits 100 columns).")(f)


def text_only(as_json: bool, markdown: bool = False, **flags) -> None:
    """Refuse --explain/--wide with --json or --markdown: they shape the text, and the JSON (the report) holds every
    figure and note already."""
    given = [f"--{k}" for k, v in flags.items() if v]
    if given and (as_json or markdown):
        from ..errors import BadInput
        other = "--json" if as_json else "--markdown"
        raise BadInput(f"{' and '.join(given)} shape{'s' * (len(given) == 1)} the text; {other} holds everything"
                       " already: give one")


def same_options(ctx, command: list[str], drop=(), add=()) -> list[str]:
    """`gputopo COMMAND...` with the options typed for this command, as typed, less those named in `drop` (click
    names), then `add`; every word quoted for the shell: the next command a text answer names."""
    import shlex
    opts = {name: p for p in ctx.command.params if isinstance(p, click.Option)
            for name in p.opts + p.secondary_opts}
    args, out, i = ctx.meta.get(ARGS, []), ["gputopo", *command], 0
    while i < len(args) and args[i] != "--":
        word = args[i]
        name = word.partition("=")[0] if word.startswith("--") else word[:2]
        p = opts.get(name)
        value = args[i + 1:i + 2] if p is not None and word == name and not (p.is_flag or p.count) else []
        i += 1 + len(value)
        if p is None or p.name not in drop:
            out += [word, *value]
    return [shlex.quote(w) for w in out + list(add)]


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
