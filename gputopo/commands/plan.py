"""`gputopo plan`: memory per GPU for each strategy and the one to use."""
from __future__ import annotations

import click

from ..options import COUNT, TIMEOUT, gpu_options, host_options, json_option, model_options, training_options, typed
from .common import Command, emit, exit_if_nothing_fits, explain_option, same_options, text_only, wide_option

# plan's options left out of the command its answer names next: those deepspeed-config has not (--calibrate's pick
# it cannot repeat: the answer says so, configure.next_step; torch's optimizer loop, configure.TORCH_LOOP, which
# DeepSpeed replaces) and those that shape plan's output only
NOT_THERE = ("measure", "calibrate", "calibrate_seconds", "as_json", "explain", "wide", "optimizer_impl", "zero_grad",
             "sync_each_batch", "fsdp_use_orig_params", "activation_offload")


@click.command(cls=Command, short_help="Memory, step time and the fastest setup that fits, searched.")
@model_options
@training_options
@gpu_options
@host_options
@click.option("--measure", is_flag=True, help="Also train the model (random weights) for two steps on this machine"
                                              " and print predicted vs measured memory.")
@click.option("--steps", type=COUNT, help="Optimizer steps of the whole run: also print its predicted time.")
@click.option("--calibrate", is_flag=True, help="Predict step times from this machine, timed for the model (minutes"
                                                " on a CPU) and each ZeRO strategy's DeepSpeed step on it"
                                                " (--calibrate-seconds), not from GPU datasheets; on a CPU, the CPU"
                                                " twin.")
@click.option("--calibrate-seconds", type=TIMEOUT, help="With --calibrate: seconds the whole calibration may take;"
                                                        " what does not fit (sample pairs past three, ZeRO-3's probe,"
                                                        " DeepSpeed's samples, the model's sample) is skipped and"
                                                        " named, and it is stopped 60 s past them [default: 300].")
@explain_option
@wide_option
@json_option
@click.pass_context
def plan(ctx, as_json, measure, steps, calibrate, calibrate_seconds, explain, wide, **options):
    """Memory and step time for each strategy (DDP, ZeRO-1/2/3, offload) and the fastest that fits."""
    from .. import render, report, request
    from ..errors import BadInput
    if calibrate_seconds is not None and not calibrate:
        raise BadInput("--calibrate-seconds needs --calibrate")
    text_only(as_json, explain=explain, wide=wide)
    req = request.from_options(options)
    for given, flag in ((calibrate, "--calibrate"), (measure, "--measure")):
        if given:
            request.runs_here(req.training, flag)
    rates, device = None, "cuda"
    if calibrate:
        from .. import calibrate as calibrating
        rates, device = calibrating.for_plan(req, calibrate_seconds, say=lambda line: click.echo(line, err=True))
    data = report.plan_for(req, rates=rates, steps=steps, device=device)
    data["next"] = None
    if data["recommendation"]["strategy"]:   # the config deepspeed-config --auto writes, from the same plan
        from .. import configure
        data["deepspeed_config"] = configure.for_plan(req, options, typed(ctx), rates, device)
        nxt = same_options(ctx, ["deepspeed-config", "--auto"], NOT_THERE, ["--launcher", "torchrun", "-o",
                                                                             "ds_config.json"])
        data["next"] = configure.next_step(req, options, typed(ctx), data["deepspeed_config"], " ".join(nxt),
                                           calibrated=calibrate)
    if measure:
        from .. import measure as measuring
        data["measured"] = measuring.check(data)
    emit(data, lambda d: render.plan(d, wide=wide, explain=explain), as_json)
    exit_if_nothing_fits(data)
