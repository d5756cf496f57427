"""`gputopo plan`: memory per GPU for each strategy and the one to use."""
from __future__ import annotations

import click

from ..options import COUNT, gpu_options, host_options, json_option, model_options, training_options
from .common import emit, exit_if_nothing_fits


@click.command()
@model_options
@training_options
@gpu_options
@host_options
@click.option("--measure", is_flag=True, help="Also train the model (random weights) for two steps on this machine"
                                              " and print predicted vs measured memory.")
@click.option("--steps", type=COUNT, help="Optimizer steps of the whole run: also print its predicted time.")
@click.option("--calibrate", is_flag=True, help="Predict step times from this machine, timed for the model for a"
                                                " few seconds and each ZeRO strategy's DeepSpeed step on it for up"
                                                " to 30 s more (on a CPU: the CPU twin), not from GPU datasheets.")
@json_option
def plan(as_json, measure, steps, calibrate, **options):
    """Memory and step time for each strategy (DDP, ZeRO-1/2/3, offload) and the fastest that fits."""
    from .. import render, report, request
    req = request.from_options(options)
    rates, device = None, "cuda"
    if calibrate:
        from .. import calibrate as calibrating
        rates, device = calibrating.for_plan(req)
    data = report.plan_for(req, rates=rates, steps=steps, device=device)
    if measure:
        from .. import measure as measuring
        data["measured"] = measuring.check(data)
    emit(data, render.plan, as_json)
    exit_if_nothing_fits(data)
