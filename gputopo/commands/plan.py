"""`gputopo plan`: memory per GPU for each strategy and the one to use."""
from __future__ import annotations

import click

from ..options import gpu_options, host_options, json_option, model_options, training_options
from .common import emit, exit_if_nothing_fits


@click.command()
@model_options
@training_options
@gpu_options
@host_options
@click.option("--measure", is_flag=True, help="Also train the model (random weights) for two steps on this machine"
                                              " and print predicted vs measured memory.")
@json_option
def plan(as_json, measure, **options):
    """Memory per GPU for each strategy (DDP, ZeRO-1/2/3, offload) and the one to use."""
    from .. import render, report, request
    data = report.plan_for(request.from_options(options))
    if measure:
        from .. import measure as measuring
        data["measured"] = measuring.check(data)
    emit(data, render.plan, as_json)
    exit_if_nothing_fits(data)
