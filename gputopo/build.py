"""The model gputopo's children train (plan --measure, --calibrate's samples): a causal LM from its transformers
config with random weights, and under LoRA/QLoRA the same model as PEFT and bitsandbytes train it
(gputopo.finetune says what that is; this builds it). Imports torch: children only."""
from __future__ import annotations


def build_model(req: dict, device, layers: int | None = None):
    """(model, config): the request's causal LM from its transformers config, random weights (seed 0), in
    training mode, checkpointed when asked; cut to `layers` blocks when given (calibration's samples; also
    gputopo.measure's child, which builds the whole model)."""
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model(**req["config"])
    if layers:
        cfg.num_hidden_layers = layers
    torch.manual_seed(0)
    attention = None if req["attention"] == "auto" else req["attention"]   # None: transformers' own choice
    with device:
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attention,
                                                              trust_remote_code=False)   # data is read, never run
    model.train()
    if req["grad_checkpointing"]:
        model.gradient_checkpointing_enable()
    ft = req.get("finetune") or {"mode": "full"}
    if ft["mode"] != "full":
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(req.get("precision"))
        model = peft_model(torch, model, ft, dtype, req["grad_checkpointing"], device)
    return model, cfg


def peft_model(torch, model, ft: dict, dtype, checkpointing: bool, device):
    """The model as PEFT trains it: LoRA on the base loaded in the compute dtype (finetune.half_base), or QLoRA on
    the base reloaded through transformers' BitsAndBytesConfig (NF4, double quantization, the compute dtype) and
    prepared as TRL and the QLoRA recipe prepare it (prepare_model_for_kbit_training: the unquantized rest upcast to
    fp32, input gradients for checkpointing); LoraConfig with the plan's rank, targets and dropout (PEFT's fp32
    adapters: autocast_adapter_dtype). Offline: the model goes through a temporary folder, bitsandbytes' kernel hub
    is not asked (HF_HUB_OFFLINE, set by the parent)."""
    import logging
    import tempfile

    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    for name in ("bitsandbytes", "kernels", "peft", "transformers"):   # hub and deprecation chatter
        logging.getLogger(name).setLevel(logging.ERROR)
    targets = "all-linear" if "all-linear" in ft["targets"] else list(ft["targets"])
    if ft["mode"] == "qlora":
        attention = model.config._attn_implementation
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            compute = dtype or torch.float32
            quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                       bnb_4bit_compute_dtype=compute)
            model = AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, dtype=compute,
                                                         device_map={"": device}, attn_implementation=attention)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=checkpointing)
    else:
        if dtype:
            model.to(dtype)
        if checkpointing:   # the frozen embeddings' output must ask for a gradient, or checkpointed blocks get none
            model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=ft["rank"], target_modules=targets, lora_dropout=ft["dropout"]))
    model.train()
    return model
