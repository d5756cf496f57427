"""`gputopo doctor`: host and install traps that break multi-GPU runs."""
from __future__ import annotations

import click

from ..options import DIR, PATH, json_option
from .common import Command, emit, explain_option, text_only, wide_option


@click.command(cls=Command, short_help="Host and install traps that break multi-GPU runs.")
@click.option("--config", "config_path", type=PATH, metavar="DS.json",
              help="Also check what this DeepSpeed config needs: its compiled ops, NVMe folder, locked memory.")
@click.option("--nvme-path", type=DIR, metavar="DIR",
              help="Also check this folder for NVMe offload: writable, on NVMe or not, free space.")
@explain_option
@wide_option
@json_option
@click.pass_context
def doctor(ctx, config_path, nvme_path, explain, wide, as_json):
    """Host and install traps that break multi-GPU runs, worst first; exit 1 if one will."""
    from .. import doctor as doctoring
    from .. import nvme, render
    text_only(as_json, explain=explain, wide=wide)
    cfg = doctoring.read_config(config_path) if config_path else None
    if nvme_path:
        nvme.given(nvme_path)  # refused in the words plan and deepspeed-config use for the same path
    data = doctoring.run(cfg, config_path=config_path, nvme_path=nvme_path)
    emit(data, lambda d: render.doctor(d, wide=wide, explain=explain), as_json)
    ctx.exit(data["exit_code"])
