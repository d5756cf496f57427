"""The `gputopo` command line: the click group that assembles gputopo/commands/ and turns errors into one line."""
from __future__ import annotations

import gc

import click

from . import __version__, children, files
from .commands import Commands
from .errors import BadInput, GputopoError, InternalError, Interrupted, WriteFailed
from .units import escaped


def _usage_error(e: click.UsageError) -> click.exceptions.Exit:
    """Click's usage errors as one line, like every other refusal: `Error: --gpu-mem 24: give a unit ...`."""
    if isinstance(e, click.exceptions.NoArgsIsHelpError):  # bare `gputopo`: the help, not an error
        click.echo(e.ctx.get_help())
        return click.exceptions.Exit(0)
    if isinstance(e, click.BadParameter) and not isinstance(e, click.MissingParameter) and e.param is not None:
        opts = [o for o in getattr(e.param, "opts", []) if o.startswith("--")] or getattr(e.param, "opts", [])
        name = max(opts, key=len) if opts else e.param.name
        click.echo(f"Error: {escaped(f'{name} {e.message}')}", err=True)
    else:
        click.echo(f"Error: {escaped(e.format_message())}", err=True)
    return click.exceptions.Exit(e.exit_code)


class Group(click.Group):
    """Turns every GputopoError and usage error into one `Error: ...` line (after the error's details, one per
    line) and its exit code; --debug shows the traceback."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as e:
            raise _usage_error(e) from None

    def invoke(self, ctx):
        debug = lambda: bool(ctx.obj and ctx.obj.get("debug"))   # noqa: E731 (set by the group's callback, inside)
        try:
            with children.stoppable():   # SIGTERM and SIGHUP stop a command as Ctrl-C does (gputopo.children)
                try:
                    return super().invoke(ctx)
                except KeyboardInterrupt as e:
                    how = children.NAMES.get(children.signal_of(e), "interrupted")
                    raise Interrupted(f"interrupted ({how}): gputopo {ctx.invoked_subcommand or ''} stopped, with"
                                      " every process it started; nothing more was written",
                                      signum=children.signal_of(e)) from None
        except click.UsageError as e:
            raise _usage_error(e) from None
        except GputopoError as e:
            if debug():
                raise
            self._say(e, ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:   # a bug: one line and its own status, never a traceback exiting 1
            if debug():
                raise
            self._say(InternalError(f"internal error, {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                                    " (gputopo --debug ... shows the traceback; please report it)"), ctx)

    @staticmethod
    def _say(e: GputopoError, ctx) -> None:
        for line in e.details:
            click.echo(line, err=True)
        # A refusal is one line whatever a path or value held; a failed run's report keeps its own lines (the
        # child's last lines), each with its control characters escaped.
        said = escaped(str(e)) if isinstance(e, BadInput) else "\n".join(map(escaped, str(e).split("\n")))
        click.echo(f"Error: {said}", err=True)
        if isinstance(e, Interrupted):
            STOPPED.append(e.exit_code)   # main() ends the process at once with it
        ctx.exit(e.exit_code)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Sizes (--gpu-mem, --cpu-mem, --nvme-free, ...) are binary, as GPUs are sold and nvidia-smi and"
                    " `free -g` print them: 80GB = 80 GiB; a number without a unit is refused, and a lowercase b is"
                    " bits (100Gb/s). Refusals are one `Error:` line and exit 2; nothing fits: 1; no GPU/NVML: 3; too"
                    " few GPUs: 4; a launched benchmark failed: 5; a bug: 70; stopped by a signal: 128 + it"
                    " (Ctrl-C 130, SIGTERM 143, SIGHUP 129) (docs/options.md).")
@click.version_option(__version__, prog_name="gputopo")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx, debug):
    """Multi-GPU topology, strategy and launch advice: inspect, plan, deepspeed-config, doctor, bench-nvlink."""
    ctx.obj = {"debug": debug}


cli.commands = Commands()   # each command's module imported when that command is asked for


# The status of an interrupted command, for main(): the children are stopped and the folders removed by then, so
# the process ends at once. The interpreter's own shutdown (a library's atexit hook, an extension half imported
# when the signal came) was seen to end it by SIGINT instead, 1 run in about 13 (tests/test_signals.py), as the
# workers' exit flake ends theirs (gputopo.worker.run_child).
STOPPED: list[int] = []


def main():
    files.guard_stdout()   # stdout that cannot be written is one line and exit 1, as any output (gputopo.files)
    try:
        cli(prog_name="gputopo")
    except WriteFailed as e:   # stdout failed outside a command: --help, --version
        click.echo(f"Error: {e}", err=True)
        raise SystemExit(e.exit_code) from None
    except SystemExit:
        if STOPPED:
            import os
            import sys
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(STOPPED[0])
        raise
    finally:
        # The finished command's objects are left to the process's end: the interpreter's exit would otherwise search
        # them all for reference cycles to free, ~6 ms of the ~65 an `inspect -f` takes (issue 50).
        gc.freeze()
