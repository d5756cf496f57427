"""Launch commands and files for a DeepSpeed config: torchrun, deepspeed, accelerate, Slurm. Pure text.

Files never hold a shell variable: YAML and hostfiles expand none, so `main_process_ip: $MASTER_ADDR` would
send every node looking for a host named "$MASTER_ADDR". What differs per node, or is known only there (the
head node's address without --master-addr, the node's rank), goes on the printed command line as
"$MASTER_ADDR" / "$NODE_RANK", and `run` says on which node to run which command.

The deepspeed launcher's ssh path starts the other nodes' processes in a non-interactive remote shell: its PATH
lacks the launching shell's virtualenv (DeepSpeed's JIT ops look for `ninja` there) and no variable crosses but
DeepSpeed's few (PYTHON*, NCCL*, ...). So beside the hostfile goes `.deepspeed_env` (KEY=VALUE lines DeepSpeed
exports on every node) with the launching shell's PATH and paths (ENV_CARRIED), and the command names it in
DS_ENV_FILE. DeepSpeed pastes each value unquoted, or in double quotes, into the remote command line: a value
holding `$`, a backquote, a backslash or a double quote is left out, with a note.
"""
from __future__ import annotations

import os
import re
import shlex

from .errors import BadInput

LAUNCHERS = ("torchrun", "deepspeed", "accelerate", "slurm")
PORT = 29500
CPUS_PER_PROCESS = 2   # Slurm's default --cpus-per-task: the training process and one DataLoader worker each
MOST_CPUS_PER_TASK = 4096   # what --cpus-per-task itself takes
FILES = {"accelerate": ("accelerate_config.yaml",), "deepspeed": ("hostfile", ".deepspeed_env"),
         "slurm": ("train.sbatch",)}
FSDP_YAML = "accelerate_fsdp_config.yaml"   # --auto --launcher accelerate where the plan's pick is PyTorch FSDP
# What the remote shell of `deepspeed --hostfile` lacks, carried in .deepspeed_env when set here: where the
# virtualenv's tools are, CUDA for op builds, the JIT ops' folder, the Hugging Face cache.
ENV_CARRIED = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "TORCH_EXTENSIONS_DIR", "HF_HOME")
UNSAFE_IN_ENV = set('$`\\"\n')


# What a host name may hold (RFC 1123 names, IPv4 and IPv6 addresses, ssh's user@host, a scope's %): anything
# else would be read by pdsh as a list (`,`, `[1-4]`) or by the remote shell, where pdsh writes it unquoted (%h).
HOST = re.compile(r"[A-Za-z0-9_.:@%-]+")
MOST_HOST = 4096   # characters, as any name or path gputopo takes (options.MOST_PATH: Linux's PATH_MAX)


def host_problem(host: str) -> str | None:
    """What makes `host` no host name to hand to ssh, pdsh or a launcher, as the end of a sentence that names it
    ("'a;b' is not a host name ..."); None for a host name or address. The one rule for --hosts (gputopo.gather)
    and --master-addr."""
    if len(host) > MOST_HOST:
        return f"{host[:20]!r}... has {len(host)} characters: a host name has at most {MOST_HOST}"
    if host.startswith("-"):
        return f"{host!r} starts with '-', which ssh would read as an option: not a host name"
    if not HOST.fullmatch(host):
        return f"{host!r} is not a host name or IP address (letters, digits and . - _ : @ %)"
    return None


def check_options(launcher: str | None, nodes: int, master_addr: str | None, port: int | None,
                  script_given: bool = False, cpus_given: bool = False, script: str = "train.py") -> None:
    """Refuse launch options that would change nothing for this launcher and layout (--ds-optimizer is the
    config's: gputopo.dsconfig refuses it). port: None when --master-port was not typed."""
    if script_given and launcher is None:
        raise BadInput("--script names the training script in the launch command: add --launcher")
    if script.startswith("-"):   # quoting keeps the shell out; a leading '-' the launcher would read as its own option
        raise BadInput(f"--script {script}: starts with '-', which the launcher would read as its own option"
                       f" (--no-python, --config_file=...): name the file as ./{script}")
    if cpus_given and launcher != "slurm":
        raise BadInput("--cpus-per-task sizes the Slurm job (#SBATCH --cpus-per-task): it needs --launcher slurm")
    if master_addr is not None:
        if launcher is None or launcher == "slurm" or nodes < 2:
            raise BadInput("--master-addr is for --launcher torchrun|deepspeed|accelerate with --nodes 2 or more"
                           " (Slurm finds its head node itself)")
        found = master_problem(master_addr)
        if found:
            raise BadInput(f"--master-addr {found}")
    if port is not None and (launcher is None or (launcher == "torchrun" and nodes == 1)):
        raise BadInput("--master-port is for --launcher (one-node torchrun --standalone picks a free port itself)")


def master_problem(addr: str) -> str | None:
    """What makes `addr` no head-node address, as a sentence that names it; None for a host name, an IPv4 address
    or an IPv6 one in brackets ([fe80::1%eth0], as host:port needs it), by --hosts' rule (host_problem):
    the address reaches the hostfile, DeepSpeed's pdsh runner puts it unquoted into each node's remote shell, and
    ssh reads a leading '-' as an option."""
    import ipaddress
    inner = addr[1:-1] if addr.startswith("[") and addr.endswith("]") else None
    if inner is not None:
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            return f"{addr!r}: not an IPv6 address in its brackets"
        return f"{addr!r}: not an IPv6 address in its brackets" if host_problem(inner) else None   # its %scope
    found = host_problem(addr)
    if found:
        return found
    if ":" in addr:
        try:
            ipaddress.IPv6Address(addr)
        except ValueError:
            return f"{addr}: the address alone; the port goes in --master-port"
        return f"{addr}: an IPv6 address goes in brackets, [{addr}], as host:port needs it"
    return None


def file_names(launcher: str | None, nodes: int) -> list[str]:
    """The files a launcher needs besides the DeepSpeed config (a hostfile and .deepspeed_env only for several
    nodes)."""
    if launcher not in FILES or (launcher == "deepspeed" and nodes == 1):
        return []
    return list(FILES[launcher])


def command(launcher: str, config: str, *, gpus: int, nodes: int = 1, script: str = "train.py",
            master: str | None = None, port: int = PORT, stage: int = 0, folder: str = "",
            shape: str = "trainer", ds_optimizer: bool = False, grad_accum: int = 1, env: dict | None = None,
            cpus: int | None = None, assumed: dict | None = None, script_args: list[str] | None = None,
            here: bool = True, saved: bool = True, threads: int | None = None) -> dict:
    """{"launcher", "command", "run": [{"where", "command"}], "files": {path: text}, "notes", "script_needs"}.

    config: the DeepSpeed file as the commands name it; folder: where the launcher files go (beside the config);
    shape: "trainer" (HF Trainer, "auto"), "initialize" (deepspeed.initialize) or "accelerate"; env: the
    launching shell's variables (ENV_CARRIED) for the deepspeed launcher's .deepspeed_env; cpus: Slurm's
    --cpus-per-task (None: CPUS_PER_PROCESS per process of the node); assumed: what the plan took for granted
    that the script must do (script_needs); script_args: what follows the config on the script's command line
    (the plan's micro-batch, accumulation, precision and checkpointing as the script reads them); here: the GPUs
    are this machine's (False: a machine described, whose paths and shell this one's say nothing of: the files
    name the config as the commands do, relative to where they are launched, and carry none of this shell);
    saved: the config was written to `config` (False: printed, to be saved under that name first); threads: each
    rank's OMP_NUM_THREADS, the cores per rank the plan priced DeepSpeed's CPU Adam on (torchrun sets 1 for several
    processes per node unless it is set)."""
    q = shlex.quote
    machine = "this machine" if here else "the training machine"
    path = {name: os.path.join(folder, name) for names in FILES.values() for name in names}
    endpoint = q(f"{master}:{port}") if master else f'"$MASTER_ADDR:{port}"'
    args = f"{q(script)} --deepspeed {q(config)}" + "".join(f" {a}" for a in script_args or [])
    files: dict[str, str] = {}
    notes: list[str] = []
    run: list[dict] = []
    omp = f"OMP_NUM_THREADS={threads} " if threads else ""
    if threads:
        env = {**(env or {}), "OMP_NUM_THREADS": str(threads)}   # the other nodes' ranks too (.deepspeed_env)
        notes.append(f"OMP_NUM_THREADS={threads}: each rank's share of the node's cores, which the plan priced"
                     " DeepSpeed's CPU Adam on (torchrun would set 1)")
    if launcher == "torchrun":
        if nodes == 1:
            run.append({"where": machine, "command": f"{omp}torchrun --standalone --nproc_per_node {gpus} {args}"})
        else:
            run.append({"where": f"every node ({nodes}), at the same time",
                        "command": f"{omp}torchrun --nnodes {nodes} --nproc_per_node {gpus} --rdzv_backend c10d"
                                   f" --rdzv_endpoint {endpoint} --rdzv_id gputopo {args}"})
            notes.append("c10d hands out ranks: the command is the same on every node")
    elif launcher == "deepspeed":
        if nodes == 1:
            port_arg = f" --master_port {port}" if port != PORT else ""
            run.append({"where": machine, "command": f"{omp}deepspeed --num_gpus {gpus}{port_arg} {args}"})
        else:
            hosts = [master or "node1"] + [f"node{i + 1}" for i in range(1, nodes)]
            files[path["hostfile"]] = "".join(f"{h} slots={gpus}\n" for h in hosts)
            carried = (env or {}) if here else {k: v for k, v in (env or {}).items() if k == "OMP_NUM_THREADS"}
            files[path[".deepspeed_env"]], left_out = deepspeed_env(carried)
            hf = q(path["hostfile"])
            common = f"--master_addr {q(hosts[0])} --master_port {port}"
            run.append({"where": f"node 0 ({hosts[0]}) only: it starts the others over passwordless ssh",
                        "command": f"DS_ENV_FILE={q(path['.deepspeed_env'])} deepspeed --hostfile {hf}"
                                   f" --num_nodes {nodes} --num_gpus {gpus} {common} {args}"})
            run.append({"where": "every node instead, without ssh: NODE_RANK=0 on the first host of the hostfile,"
                                 f" {_ranks(nodes)} on the others in hostfile order",
                        "command": f'deepspeed --hostfile {hf} --no_ssh --node_rank "$NODE_RANK" {common} {args}'})
            notes.append(f"edit {path['hostfile']}: one line per node, its ssh-reachable name and its GPU count"
                         + ("" if master else " (node1 is the head node)"))
            notes.append(_env_note(path[".deepspeed_env"], here))
            notes += [f"{name} is not in {path['.deepspeed_env']}: its value holds $, `, \\ or \" that the"
                      " remote shell would expand" for name in left_out]
    elif launcher == "accelerate":
        _accelerate(files, run, notes, config, path["accelerate_config.yaml"], script=script, gpus=gpus, nodes=nodes,
                    master=master, port=port, stage=stage, machine=machine, here=here, omp=omp)
    elif launcher == "slurm":
        asked = cpus or min(MOST_CPUS_PER_TASK, max(CPUS_PER_PROCESS, threads or 0) * gpus)
        files[path["train.sbatch"]] = sbatch(args, gpus=gpus, nodes=nodes, port=port, cpus=asked, threads=threads)
        run.append({"where": "a Slurm login node", "command": f"sbatch {q(path['train.sbatch'])}"})
        notes += _slurm_notes(gpus, cpus, asked)
    else:
        raise ValueError(launcher)
    if not saved:   # the config went to stdout: the commands name the file it must be saved as
        run, notes = _printed(run, notes, config, list(files))
    return {"launcher": launcher, "command": run[0]["command"], "run": run, "files": files, "notes": notes,
            "script_needs": script_needs(launcher, shape, ds_optimizer, grad_accum, assumed or {})}


def _accelerate(files: dict, run: list, notes: list, config: str, yaml: str, *, script: str, gpus: int, nodes: int,
                master: str | None, port: int, stage: int, machine: str, here: bool, omp: str = "") -> None:
    """accelerate's YAML (into files), its commands (run) and notes."""
    q = shlex.quote
    # Absolute here: accelerate reads the path relative to where it is launched, not to the YAML. For another
    # machine as the commands name it (relative to where they are launched there): no path of this one.
    files[yaml] = accelerate_yaml(os.path.abspath(config) if here else config, gpus=gpus, nodes=nodes, master=master,
                                  port=port, stage=stage)
    cmd = f"{omp}accelerate launch --config_file {q(yaml)}"
    if not here and not os.path.isabs(config):
        notes.append(f"{yaml} names {config} relative to where accelerate is launched (no path of this machine):"
                     " launch from the folder the commands name them from")
    if nodes == 1:
        run.append({"where": machine, "command": f"{cmd} {q(script)}"})
    else:
        ip = "" if master else ' --main_process_ip "$MASTER_ADDR"'
        run.append({"where": f"node 0, the head node{f' ({master})' if master else ''}",
                    "command": f"{cmd}{ip} --machine_rank 0 {q(script)}"})
        run.append({"where": f"each other node, with its rank ({_ranks(nodes)}) in NODE_RANK, at the same time",
                    "command": f'{cmd}{ip} --machine_rank "$NODE_RANK" {q(script)}'})
        if not master:
            notes.append("set MASTER_ADDR to the head node's address on every node (or pass --master-addr to"
                         " write it into the YAML)")
    notes.append("precision and batch sizes live in the DeepSpeed file: accelerate refuses `mixed_precision`"
                 " in a YAML that names a deepspeed_config_file")


def _env_note(env_file: str, here: bool) -> str:
    """What .deepspeed_env carries: this shell's PATH and paths, or for another machine nothing of this one."""
    rule = "KEY=VALUE lines (no comment, no blank line: DeepSpeed splits every line at '=')"
    if here:
        return (f"{env_file} (DS_ENV_FILE): what the nodes started over ssh get of this shell's environment; add"
                f" your script's variables as {rule}")
    return (f"{env_file} (DS_ENV_FILE) is empty: the machine planned is not this one, so nothing of this shell goes"
            " in it; add the nodes' PATH with their virtualenv's bin first (PATH=/path/to/venv/bin:/usr/bin:/bin)"
            f" and your script's variables as {rule}")


def _printed(run: list[dict], notes: list[str], config: str, files: list[str]) -> tuple[list[dict], list[str]]:
    """The runs and notes of a launch whose config (and files) went to stdout: each run says to save it first."""
    also = f" (and {', '.join(files)})" if files else ""
    run = [{**r, "where": f"{r['where']}, after saving the config printed above as {config}{also}"} for r in run]
    said = (f"the config was printed to stdout, not written: save it as {config}"
            + (f" and the files printed above under their names ({', '.join(files)})" if files else "")
            + f" before launching, or give -o {config} to write {'them' if files else 'it'}")
    return run, [said, *notes]


def _slurm_notes(gpus: int, cpus: int | None, asked: int) -> list[str]:
    """What the sbatch script does about the rendezvous, and the CPUs it asks when the user gave no number."""
    notes = ["srun starts one torchrun per node; the rendezvous is the job's first node (from scontrol), so no"
             " address is needed"]
    if not cpus:
        why = (f"{CPUS_PER_PROCESS} CPUs per process (the training process and one DataLoader worker)"
               if asked == CPUS_PER_PROCESS * gpus else "the node's cores the plan priced CPU Adam on")
        notes.append(f"--cpus-per-task={asked} asks {why}: a node with fewer leaves the job pending"
                     " (Reason=PartitionConfig or Resources); give --cpus-per-task N for your nodes' share")
    return notes


def _ranks(nodes: int) -> str:
    return "1" if nodes == 2 else f"1 to {nodes - 1}"


def deepspeed_env(env: dict) -> tuple[str, list[str]]:
    """.deepspeed_env's text: KEY=VALUE for each ENV_CARRIED variable set in env; and the names left out,
    their values holding what the remote shell would expand."""
    lines, left_out = [], []
    for name in ENV_CARRIED + ("OMP_NUM_THREADS",):   # the threads the plan priced, on every node
        if env.get(name):
            if UNSAFE_IN_ENV & set(env[name]):
                left_out.append(name)
            else:
                lines.append(f"{name}={env[name]}\n")
    return "".join(lines), left_out


def accelerate_fsdp_yaml(*, gpus: int, nodes: int, master: str | None, port: int, offload: bool, precision: str,
                         checkpointing: bool) -> str:
    """An accelerate config for PyTorch FSDP full shard as the plan priced it (fsdp, fsdp_offload_cpu): each
    transformer block a unit, parameters offloaded to the host where planned, and what a frozen or 4-bit base needs
    (accelerate's and PEFT's FSDP-QLoRA guides): use_orig_params false (flat parameters: the 16-bit quant storage
    shards), cpu_ram_efficient_loading with sync_module_states (rank 0 loads the weights, the others build on the
    meta device)."""
    mixed = {"bf16": "bf16", "fp16": "fp16"}.get(precision, "no")
    lines = [
        "compute_environment: LOCAL_MACHINE",
        "distributed_type: FSDP",
        "fsdp_config:",
        f"  fsdp_activation_checkpointing: {'true' if checkpointing else 'false'}",
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP",
        "  fsdp_backward_prefetch: BACKWARD_PRE",
        "  fsdp_cpu_ram_efficient_loading: true",
        "  fsdp_forward_prefetch: false",
        f"  fsdp_offload_params: {'true' if offload else 'false'}",
        "  fsdp_sharding_strategy: FULL_SHARD",
        "  fsdp_state_dict_type: SHARDED_STATE_DICT",
        "  fsdp_sync_module_states: true",
        "  fsdp_use_orig_params: false",
        f"mixed_precision: {mixed}"]
    return _accelerate_machines(lines, gpus=gpus, nodes=nodes, master=master, port=port)


def accelerate_yaml(config: str, *, gpus: int, nodes: int, master: str | None, port: int, stage: int) -> str:
    """An accelerate config (as `accelerate config` writes it) that hands everything DeepSpeed to `config`."""
    lines = [
        "compute_environment: LOCAL_MACHINE",
        "distributed_type: DEEPSPEED",
        "deepspeed_config:",
        f"  deepspeed_config_file: {yaml_text(config)}",
        # "standard": torchrun on each node (accelerate's DEEPSPEED_MULTINODE_LAUNCHERS[1]); the default is pdsh
        # from node 0, and accelerate takes any other word, "standalone" too, as pdsh without a warning.
        *(["  deepspeed_multinode_launcher: standard"] if nodes > 1 else []),
        f"  zero3_init_flag: {'true' if stage == 3 else 'false'}"]
    return _accelerate_machines(lines, gpus=gpus, nodes=nodes, master=master, port=port)


def _accelerate_machines(lines: list[str], *, gpus: int, nodes: int, master: str | None, port: int) -> str:
    """An accelerate config's own lines, then where its processes run (keys in `accelerate config`'s order)."""
    tail = ["machine_rank: 0",
            *([f"main_process_ip: {yaml_text(master)}"] if master else []),
            f"main_process_port: {port}",
            "main_training_function: main",
            f"num_machines: {nodes}",
            f"num_processes: {gpus * nodes}",
            "rdzv_backend: static",
            "same_network: true",
            "use_cpu: false",
            ""]
    return "\n".join(lines + tail)


# YAML 1.1's words for true, false and null (PyYAML's resolver, which accelerate reads its config with): a host
# named `yes` or `null` would be read as a bool or None.
YAML_WORDS = frozenset("y n yes no true false on off null".split())


def yaml_text(value: str) -> str:
    """`value` as a YAML scalar that reads back as this very string: plain where it can be nothing else (a letter or
    / first, then letters, digits and . / _ @ % + -: no number, date, bool, null, alias, tag, flow or comment), else
    double-quoted by JSON's rules, which YAML reads as they are."""
    import json
    import re
    if re.fullmatch(r"[A-Za-z/_][A-Za-z0-9_./@%+-]*", value) and value.lower() not in YAML_WORDS:
        return value
    return json.dumps(value)


def sbatch(args: str, *, gpus: int, nodes: int, port: int, cpus: int, threads: int | None = None) -> str:
    """A batch script: srun runs one torchrun per node; c10d rendezvous on the job's first node."""
    return "\n".join([
        "#!/bin/bash",
        "#SBATCH --job-name=gputopo-train",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus}",
        f"#SBATCH --cpus-per-task={cpus}",
        "#SBATCH --output=%x-%j.out",
        "set -euo pipefail",
        # sed reads every name: `head -n 1` closes the pipe early and, under pipefail, scontrol's SIGPIPE ends
        # the job silently (1 run in 4 with two nodes).
        "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed -n 1p)",
        *([f"export OMP_NUM_THREADS={threads}   # each rank's cores, as the plan priced CPU Adam"] if threads else []),
        "# One torchrun per node; c10d rendezvous on the first node.",
        f"srun torchrun --nnodes \"$SLURM_NNODES\" --nproc_per_node {gpus} --rdzv_backend c10d \\",
        f"  --rdzv_endpoint \"$head:{port}\" --rdzv_id \"$SLURM_JOB_ID\" {args}", ""])


def script_needs(launcher: str, shape: str, ds_optimizer: bool, grad_accum: int, assumed: dict) -> list[str]:
    """What the user's training script must contain for this launcher and config, and for what the plan assumed
    (assumed: "micro_batch", "grad_checkpointing", "no_gpu", "steps" when the Trainer's --max_steps does not say
    them, "stack": what no flag of the script's runs)."""
    return _needs(launcher, shape, ds_optimizer, grad_accum, assumed) + list(assumed.get("stack") or [])


def _needs(launcher: str, shape: str, ds_optimizer: bool, grad_accum: int, assumed: dict) -> list[str]:
    ckpt, steps = assumed.get("grad_checkpointing"), assumed.get("steps")
    stop = (f"stop after {steps:,} optimizer steps (the run the plan timed; --max_steps on a Trainer's line)"
            if steps else None)
    if launcher == "accelerate":
        micro = assumed.get("micro_batch")
        lines = ["nothing DeepSpeed-specific: accelerate passes the config to DeepSpeed in prepare()",
                 f"accelerator = Accelerator(gradient_accumulation_steps={grad_accum})"
                 "  # fills gradient_accumulation_steps",
                 (f"train_dataloader = DataLoader(dataset, batch_size={micro})  # the micro-batch the plan assumed;"
                  if micro else "the prepared DataLoader's batch_size")
                 + " fills train_micro_batch_size_per_gpu (and train_batch_size)"]
        if assumed.get("no_gpu"):
            lines.append("only where the machines it runs on have no GPU, as this one: from accelerate.utils import"
                         " InitProcessGroupKwargs; Accelerator(..., kwargs_handlers=[InitProcessGroupKwargs("
                         "backend=\"gloo\")])  # without it accelerate finds no process-group backend for DeepSpeed"
                         " on a CPU and counts 1 process while DeepSpeed runs them all (\"train_batch_size ... !="
                         " ...\"); GPU nodes need nothing of the kind")
        if ckpt:
            lines.append("model.gradient_checkpointing_enable()  # before prepare(): the plan's fit assumed"
                         " gradient checkpointing, which accelerate does not turn on")
        lines += _accelerate_optimizer(ds_optimizer)
        lines.append("accelerator.backward(loss); optimizer.step(); optimizer.zero_grad()")
        return lines + ([stop] if stop else [])
    if shape == "trainer":
        return ["HF Trainer: parse the command line into TrainingArguments (HfArgumentParser), so --deepspeed"
                " CONFIG reaches TrainingArguments(deepspeed=...); the Trainer fills every \"auto\""
                + (" (and gradient_checkpointing=True: the plan assumed it)" if ckpt else "")]
    lines = ["parser.add_argument('--deepspeed', metavar='CONFIG')",
             "engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),"
             " config=args.deepspeed)",
             "loss = engine(batch); engine.backward(loss); engine.step()"]
    if ckpt:
        lines.insert(1, "parser.add_argument('--gradient_checkpointing', action='store_true'); if it is given:"
                        " model.gradient_checkpointing_enable()  # before deepspeed.initialize: the plan assumed"
                        " gradient checkpointing")
    if launcher == "deepspeed":
        lines.insert(1, "parser.add_argument('--local_rank', type=int)  # the deepspeed launcher passes it")
    return lines + ([stop] if stop else [])


def _accelerate_optimizer(ds_optimizer: bool) -> list[str]:
    """The optimizer lines of an accelerate script: DeepSpeed's (DummyOptim) or the script's own."""
    if ds_optimizer:
        return ["from accelerate.utils import DummyOptim, DummyScheduler",
                "optimizer = DummyOptim(model.parameters(), lr=LR, weight_decay=WD)"
                "  # DeepSpeed's AdamW; lr and weight_decay fill the config's \"auto\"",
                "scheduler = DummyScheduler(optimizer, total_num_steps=STEPS, warmup_num_steps=WARMUP)"
                "  # DeepSpeed's WarmupDecayLR",
                "model, optimizer, train_dataloader, scheduler = accelerator.prepare(model, optimizer,"
                " train_dataloader, scheduler)"]
    return ["your own optimizer and scheduler (torch.optim.AdamW, ...):"
            " model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)"]
