"""Launch commands for a DeepSpeed config: torchrun, deepspeed, accelerate, Slurm. Pure text."""
from __future__ import annotations

import shlex

LAUNCHERS = ("torchrun", "deepspeed", "accelerate", "slurm")
PORT = 29500


def command(launcher: str, config: str, *, gpus: int, nodes: int = 1, script: str = "train.py",
            master: str = "$MASTER_ADDR", stage: int = 0) -> dict:
    """{"launcher", "command", "files": {name: text}, "notes": [...]} for one launcher and layout."""
    cfg = shlex.quote(config)
    args = f"{shlex.quote(script)} --deepspeed {cfg}"
    files: dict[str, str] = {}
    notes: list[str] = []
    if launcher == "torchrun":
        if nodes == 1:
            cmd = f"torchrun --standalone --nproc_per_node {gpus} {args}"
        else:
            cmd = (f"torchrun --nnodes {nodes} --nproc_per_node {gpus} --rdzv_backend c10d"
                   f" --rdzv_endpoint {master}:{PORT} --rdzv_id gputopo {args}")
            notes.append(f"run the same command on each of the {nodes} nodes; {master} is the first node's address")
    elif launcher == "deepspeed":
        if nodes == 1:
            cmd = f"deepspeed --num_gpus {gpus} {args}"
        else:
            files["hostfile"] = "".join(f"node{i + 1} slots={gpus}\n" for i in range(nodes))
            cmd = (f"deepspeed --hostfile hostfile --num_nodes {nodes} --num_gpus {gpus}"
                   f" --master_addr node1 --master_port {PORT} {args}")
            notes.append("edit hostfile with your node names; the deepspeed launcher reaches them over passwordless ssh")
    elif launcher == "accelerate":
        files["accelerate_config.yaml"] = "\n".join([
            "compute_environment: LOCAL_MACHINE",
            "distributed_type: DEEPSPEED",
            "deepspeed_config:",
            f"  deepspeed_config_file: {config}",
            f"  zero3_init_flag: {'true' if stage == 3 else 'false'}",
            "machine_rank: 0",
            f"main_process_ip: {'127.0.0.1' if nodes == 1 else master}",
            f"main_process_port: {PORT}",
            f"num_machines: {nodes}",
            f"num_processes: {gpus * nodes}",
            "rdzv_backend: static",
            "same_network: true",
            "use_cpu: false", ""])
        cmd = f"accelerate launch --config_file accelerate_config.yaml {shlex.quote(script)}"
        notes.append("the DeepSpeed file holds batch sizes and precision; keep them out of the accelerate YAML")
        if nodes > 1:
            notes.append("on node k set machine_rank: k in its copy of the YAML")
    elif launcher == "slurm":
        files["train.sbatch"] = "\n".join([
            "#!/bin/bash",
            "#SBATCH --job-name=gputopo-train",
            f"#SBATCH --nodes={nodes}",
            "#SBATCH --ntasks-per-node=1",
            f"#SBATCH --gpus-per-node={gpus}",
            "#SBATCH --cpus-per-task=8",
            "#SBATCH --output=%x-%j.out",
            "set -euo pipefail",
            "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
            "# One torchrun per node; c10d rendezvous on the first node.",
            f"srun torchrun --nnodes \"$SLURM_NNODES\" --nproc_per_node {gpus} --rdzv_backend c10d \\",
            f"  --rdzv_endpoint \"$head:{PORT}\" --rdzv_id \"$SLURM_JOB_ID\" {args}", ""])
        cmd = "sbatch train.sbatch"
    else:
        raise ValueError(launcher)
    return {"launcher": launcher, "command": cmd, "files": files, "notes": notes}
