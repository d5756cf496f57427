"""Two gloo ranks train PEFT's LoRA on a tiny Llama for two steps, under one of DDP, FSDP (FSDP2's fully_shard,
each block a unit) or DeepSpeed ZeRO-3 (issue 48: the CPU twin of the LoRA launches gputopo plans).

    torchrun --standalone --nproc_per_node 2 tests/lora_train.py ddp|fsdp|zero3 OUT.json

Rank 0 writes OUT.json: whether the adapters moved and the base did not, whether both ranks hold the same
adapters after the steps, and the trainable count against r x (in + out) per targeted module.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

RANK_R, TARGETS = 4, ["q_proj", "v_proj"]


def build():
    import transformers
    from peft import LoraConfig, get_peft_model
    transformers.logging.set_verbosity_error()
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=4, vocab_size=512, max_position_embeddings=64)
    torch.manual_seed(0)   # the same base and adapters on every rank
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model = get_peft_model(model, LoraConfig(r=RANK_R, target_modules=TARGETS, lora_dropout=0.0,
                                             init_lora_weights="gaussian"))   # B not zero: A's gradient is not 0
    expected = len(TARGETS) * cfg.num_hidden_layers * RANK_R * (64 + 64)
    return model, cfg, expected


def snapshot(model) -> dict:
    """Every parameter by name, whole (FSDP2 shards them as DTensors; ZeRO-3 gathers)."""
    out = {}
    for name, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name.replace("_fsdp_wrapped_module.", "").replace("module.", "")] = t.detach().clone().float()
    return out


def main():
    how, path = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model, cfg, expected = build()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    ids = torch.randint(0, cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(rank))
    if how == "zero3":
        import deepspeed
        config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                  "zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW",
                                                                   "params": {"lr": 1e-2, "torch_adam": True}}}
        engine, *_ = deepspeed.initialize(model=model, config=config,
                                          model_parameters=[p for p in model.parameters() if p.requires_grad])
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
            before = snapshot(engine.module)
        for _ in range(2):
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
            after = snapshot(engine.module)
    else:
        before = snapshot(model)
        if how == "ddp":
            wrapped = torch.nn.parallel.DistributedDataParallel(model)
        elif how == "fsdp":
            from torch.distributed.fsdp import fully_shard
            for layer in model.base_model.model.model.layers:
                fully_shard(layer)
            wrapped = fully_shard(model)
        else:
            raise SystemExit(f"unknown strategy {how}")
        opt = torch.optim.AdamW([p for p in wrapped.parameters() if p.requires_grad], lr=1e-2)
        for _ in range(2):
            wrapped(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
        after = snapshot(wrapped)
    lora = [n for n in after if "lora_" in n]
    moved = {n: not torch.equal(before[n], after[n]) for n in after}
    mine = torch.cat([after[n].flatten() for n in sorted(lora)])
    other = mine.clone()
    dist.broadcast(other, 0)
    agree = torch.tensor([float(torch.equal(mine, other))])
    dist.all_reduce(agree, op=dist.ReduceOp.MIN)
    if rank == 0:
        with open(path, "w") as f:
            json.dump({"strategy": how, "adapters_moved": all(moved[n] for n in lora) and bool(lora),
                       "base_moved": any(v for n, v in moved.items() if "lora_" not in n),
                       "ranks_agree": bool(agree.item()), "trainable": trainable,
                       "expected_trainable": expected}, f)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)   # as gputopo.worker ends: gloo's teardown at interpreter exit can abort (SIGABRT) after the work


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
