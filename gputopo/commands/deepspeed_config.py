"""`gputopo deepspeed-config`: a DeepSpeed config DeepSpeed accepts, and its launch."""
from __future__ import annotations

import os
import sys

import click

from ..launch import MOST_CPUS_PER_TASK
from ..options import (
    PATH,
    PORT,
    TEXT,
    Count,
    gpu_options,
    host_options,
    json_option,
    model_options,
    steps_option,
    training_options,
    typed,
)
from .common import Command, explain_option, text_only


def _show(result, output: str | None, wide: bool, explain: bool) -> None:
    """Text output: what was written and its launch first, then the rest of the launch; notes on stderr. Without
    -o the config goes to stdout, the answer to stderr: before the config on a terminal, after it when stdout is a
    file or a pipe (the data first, and a stdout that cannot be written is then the only line on stderr)."""
    from .. import render
    text = render.deepspeed_config(result.to_dict(), list(result.files), wide=wide, explain=explain)
    out = sys.stdout if output else sys.stderr  # stdout holds the config when it is printed
    first = bool(output) or sys.stdout.isatty()
    if not first:
        click.echo(result.text, nl=False)
    click.echo("\n".join(text["said"]), err=True)
    click.echo("\n".join(text["run"]), file=out)
    if first and not output:
        click.echo(result.text, nl=False)
    if text["launch"]:
        click.echo("\n".join(text["launch"]), file=out)
    if text["notes"]:
        click.echo("\n".join(text["notes"]), err=True)


@click.command("deepspeed-config", cls=Command, short_help="A DeepSpeed config DeepSpeed accepts, and its launch.",
               epilog="Only with --auto (they feed the memory plan): --gpu-mem, --link, --seq-len, --attention,"
                      " --flash-attention, --cpu-mem, --inter-node-gbps, --cpu-cores, --kernels, --loss, --steps,"
                      " --cuda-module-loading, --bnb-keeps-input, --quantizer, --selective-checkpointing,"
                      " --pure-16bit, --variable-length, --non-reentrant-checkpointing, --loop-keeps-graph,"
                      " --[no-]grad-checkpointing (with --no-hf), and"
                      " --nvme-path/--nvme-free unless --offload nvme. With --auto, what is not given is searched"
                      " as `gputopo plan` searches it (docs/plan.md). Refused, as torch's own training loop that a"
                      " DeepSpeed config replaces (plan prices it): --optimizer-impl, --zero-grad, --sync-each-batch,"
                      " --fsdp-use-orig-params, --activation-offload (torchtune's hooks; DeepSpeed's own"
                      " cpu_checkpointing offloads only under deepspeed.checkpointing).")
@click.option("--stage", type=Count(0), metavar="0-3", help="ZeRO stage 0-3 (or --auto).")
@click.option("--offload", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True,
              help="Where ZeRO keeps optimizer states (and at stage 3 parameters) off the GPU.")
@click.option("--auto", "auto_", is_flag=True, help="Take stage and offload from `gputopo plan` for --model.")
@click.option("--hf/--no-hf", default=True, show_default=True,
              help="'auto' where the HF Trainer fills values (--hf), or concrete values for deepspeed.initialize.")
@click.option("-o", "--output", type=PATH, metavar="PATH", help="Write the config here ('-' or none: stdout).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@click.option("--launcher", type=click.Choice(["torchrun", "deepspeed", "accelerate", "slurm"]),
              help="Also print the matching launch command and files.")
@click.option("--script", type=TEXT, metavar="PATH", default="train.py", show_default=True,
              help="Training script for --launcher.")
@click.option("--ds-optimizer", is_flag=True,
              help="With --launcher accelerate: DeepSpeed's AdamW and WarmupDecayLR in the config (the script uses"
                   " accelerate's DummyOptim/DummyScheduler) instead of the script's own.")
@click.option("--master-addr", type=TEXT, metavar="HOST",
              help="Head node's address for --nodes > 1, written into the launch files [default: the printed"
                   " commands read $MASTER_ADDR].")
@click.option("--master-port", type=PORT, metavar="PORT", default=29500, show_default=True,
              help="Rendezvous port on the head node for --launcher.")
@click.option("--cpus-per-task", type=Count(most=MOST_CPUS_PER_TASK, what="a Slurm task gets"), metavar="N",
              help="CPUs per node for --launcher slurm's job (#SBATCH --cpus-per-task) [default: 2 per GPU].")
@click.option("--check", is_flag=True,
              help="Run `gputopo doctor` on this config before writing it:"
                   " refuse (exit 1) if its ops cannot build here.")
@click.option("--no-compile-ops", is_flag=True,
              help='Adam/AdamW through torch ("torch_adam": true): no FusedAdam/CPUAdam to compile (slower step).')
@model_options
@training_options
@steps_option
@gpu_options
@host_options
@explain_option
@json_option
@click.pass_context
def deepspeed_config(ctx, stage, offload, auto_, hf, output, force, launcher, script, ds_optimizer, master_addr,
                     master_port, cpus_per_task, check, no_compile_ops, explain, as_json, **options):
    """Write a DeepSpeed config that DeepSpeed accepts, sized for the model and layout, and its launch."""
    from .. import configure, files, launch, render, request
    output = None if output == "-" else output  # -o -: stdout, as with no -o
    text_only(as_json, explain=explain)
    files.check_output(output, force)
    for name in launch.file_names(launcher, options["nodes"]) if output else []:
        files.check_output(os.path.join(os.path.dirname(output), name), force, what="launcher file")
    ask = configure.Ask(stage=stage, offload=offload, auto=auto_, hf=hf, output=output, launcher=launcher,
                        script=script, ds_optimizer=ds_optimizer, master_addr=master_addr, master_port=master_port,
                        cpus_per_task=cpus_per_task, check=check, torch_adam=no_compile_ops,
                        nvme_path=options.get("nvme_path"), nvme_free=options.get("nvme_free"),
                        offload_params=options.get("offload_params"),
                        given=typed(ctx))
    configure.check_options(ask, options["nodes"], bool(options.get("model") or options.get("params")))
    result = configure.generate(ask, request.from_options(options, need_model=auto_, need_layout=auto_))
    for path, content in result.files.items():
        files.write_atomic(path, content)
    if as_json:
        click.echo(render.to_json(result.to_dict()))
    else:
        _show(result, output, False, explain)
