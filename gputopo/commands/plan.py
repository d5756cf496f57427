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
@json_option
def plan(as_json, measure, steps, **options):
    """Memory and step time for each strategy (DDP, ZeRO-1/2/3, offload) and the fastest that fits."""
    from .. import render, report, request
    data = report.plan_for(request.from_options(options), steps=steps)
    if measure:
        from .. import measure as measuring
        data["measured"] = measuring.check(data)
    emit(data, render.plan, as_json)
    exit_if_nothing_fits(data)
