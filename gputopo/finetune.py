"""What is trained: the whole model (full fine-tuning), LoRA adapters beside a frozen base (PEFT's LoraConfig), or
the same with the base stored in 4 bits (QLoRA: bitsandbytes NF4 through transformers' BitsAndBytesConfig). The one
owner of their shapes, dtypes and bytes: memory, speed, plan, dsconfig and the worker ask it. Pure.

LoRA (Hu et al., arXiv 2106.09685) adds to each targeted Linear W (out x in) two matrices A (r x in) and B (out x r):
y = W x + B A dropout(x) * alpha / r, W frozen (PEFT's peft/tuners/lora/layer.py, Linear.forward). QLoRA (Dettmers et
al., arXiv 2305.14314) stores W in 4-bit NormalFloat blocks of 64 with their absmax, double quantization storing the
absmax in 8 bits with fp32 constants per 256 (bitsandbytes.functional.quantize_4bit: measured in
tests/test_finetune.py), and dequantizes W to the compute dtype for each matmul, forward and backward
(bitsandbytes' MatMul4Bit).
"""
from __future__ import annotations

import ast
import importlib.util
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import BadInput

MODES = ("full", "lora", "qlora")
DEFAULT_RANK = 8          # PEFT's LoraConfig(r=8)
DEFAULT_DROPOUT = 0.0     # PEFT's LoraConfig(lora_dropout=0.0)
ALL_LINEAR = "all-linear"   # PEFT's shorthand: every Linear (and Conv1D) but the output head
NF4_BLOCK = 64            # bitsandbytes' quantize_4bit blocksize, as BitsAndBytesConfig leaves it
NESTED_BLOCK = 256        # double quantization's block of absmax values (compress_statistics)
# PEFT's default targets per model_type (peft/utils/constants.py, TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
# peft 0.21.2), for when peft is not installed; tests/test_finetune.py holds it equal to the installed peft's.
PEFT_DEFAULTS = {
    't5': ['q', 'v'], 'mt5': ['q', 'v'], 'bart': ['q_proj', 'v_proj'], 'gpt2': ['c_attn'],
    'bloom': ['query_key_value'], 'blip-2': ['q', 'v', 'q_proj', 'v_proj'], 'opt': ['q_proj', 'v_proj'],
    'gptj': ['q_proj', 'v_proj'], 'gpt_neox': ['query_key_value'], 'gpt_neo': ['q_proj', 'v_proj'],
    'bert': ['query', 'value'], 'roberta': ['query', 'value'], 'xlm-roberta': ['query', 'value'],
    'electra': ['query', 'value'], 'deberta-v2': ['query_proj', 'value_proj'], 'deberta': ['in_proj'],
    'layoutlm': ['query', 'value'], 'llama': ['q_proj', 'v_proj'], 'llama4': ['q_proj', 'v_proj'],
    'chatglm': ['query_key_value'], 'gpt_bigcode': ['c_attn'], 'mpt': ['Wqkv'],
    'RefinedWebModel': ['query_key_value'], 'RefinedWeb': ['query_key_value'], 'falcon': ['query_key_value'],
    'btlm': ['c_proj', 'c_attn'], 'codegen': ['qkv_proj'], 'mistral': ['q_proj', 'v_proj'],
    'mixtral': ['q_proj', 'v_proj'], 'stablelm': ['q_proj', 'v_proj'], 'phi': ['q_proj', 'v_proj', 'fc1', 'fc2'],
    'gemma': ['q_proj', 'v_proj'], 'gemma2': ['q_proj', 'v_proj'], 'gemma3_text': ['q_proj', 'v_proj'],
    'gemma4': '.*language_model\\..*\\.(q_proj|v_proj)', 'qwen2': ['q_proj', 'v_proj'],
    'qwen3': ['q_proj', 'v_proj'], 'nemotron_h': ['q_proj', 'k_proj', 'v_proj', 'o_proj'],
    'rwkv': ['key', 'value', 'receptance', 'output'],
    'rwkv7': ['r_proj', 'k_proj', 'v_proj', 'o_proj', 'key', 'value'],
}
PEFT_MAPPING = "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING"


@dataclass(frozen=True)
class Finetune:
    """What is trained, as --finetune, --lora-rank, --lora-targets and --lora-dropout say; `targets` are the module
    names asked for (resolved: request fills PEFT's default for the architecture)."""
    mode: str = "full"
    rank: int = DEFAULT_RANK
    targets: tuple = ()
    dropout: float = DEFAULT_DROPOUT

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets))   # read back from JSON: a list

    @property
    def peft(self) -> bool:
        """LoRA or QLoRA: the base is frozen, adapters train."""
        return self.mode != "full"

    @property
    def quantized(self) -> bool:
        return self.mode == "qlora"

    def to_dict(self) -> dict:
        return asdict(self)


FULL = Finetune()


def peft_defaults() -> tuple[dict, str]:
    """(PEFT's default targets per model_type, where they were read): from the installed peft's own constants
    (read as text: importing peft imports torch), else the copy above."""
    spec = importlib.util.find_spec("peft")
    if spec and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "utils" / "constants.py"
        try:
            tree = ast.parse(path.read_text())
            for node in tree.body:
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == PEFT_MAPPING:
                    return ast.literal_eval(node.value), f"the installed peft's {PEFT_MAPPING}"
        except (OSError, SyntaxError, ValueError):
            pass
    return PEFT_DEFAULTS, f"peft 0.21.2's {PEFT_MAPPING} (peft is not installed here)"


def checked(mode: str | None, rank: int | None, targets: tuple | None, dropout: float | None) -> Finetune:
    """The options alone, without a model (a config without --model): full fine-tuning only. LoRA's default
    targets, the check of given ones and of the rank against their sides are the model's (resolve)."""
    mode = mode or "full"
    if mode != "full":
        raise BadInput(f"--finetune {mode} needs --model (or --params): its targets are checked against the model's"
                       " Linear modules, its default ones are PEFT's for the architecture")
    return resolve(None, mode, rank, targets, dropout, {})


def resolve(m, mode: str, rank: int | None, targets: tuple | None, dropout: float | None, notes: dict) -> Finetune:
    """--finetune and the --lora-* options checked against the model: targets among its Linear modules (PEFT's
    default for its architecture when not given), the rank at most a target's smaller side. notes gets what was
    chosen for the user."""
    if mode == "full":
        given = [o for o, v in (("--lora-rank", rank), ("--lora-targets", targets), ("--lora-dropout", dropout))
                 if v is not None]
        if given:
            raise BadInput(f"{', '.join(given)} shape{'s' if len(given) == 1 else ''} LoRA adapters: add --finetune"
                           " lora (or qlora)")
        return FULL
    held = sum(lin.fan_in * lin.fan_out * lin.count for lin in m.linears)
    if held > m.params:   # a --params model whose size leaves no room for its shape's projections
        raise BadInput(f"--finetune {mode}: {m.name} has {m.params:,} parameters, fewer than the {held:,} its"
                       f" {m.layers} layers of hidden size {m.hidden_size} hold in their Linear modules: give --params"
                       " and --hidden-size of one model (or --model)")
    rank = rank or DEFAULT_RANK
    if not targets:
        table, where = peft_defaults()
        kind = m.model_type or m.family
        if not isinstance(table.get(kind), list):   # none, or a regex over a multimodal model's paths (gemma4)
            raise BadInput(f"--finetune {mode}: PEFT has no default target modules for {kind!r}: give --lora-targets"
                           f" NAMES or {ALL_LINEAR} (its Linear modules: {', '.join(linear_names(m))})")
        targets = tuple(table[kind])
        notes["lora_targets"] = (f"LoRA targets {','.join(targets)}: PEFT's default for {kind} ({where};"
                                 f" --lora-targets to change)")
    ft = Finetune(mode, rank, tuple(targets), DEFAULT_DROPOUT if dropout is None else dropout)
    hit = targeted(m, ft)   # every name must match one of the model's modules, as PEFT requires
    small = min((min(lin.fan_in, lin.fan_out) for lin in hit), default=rank)
    if rank > small:
        raise BadInput(f"--lora-rank {rank}: above the smaller side of a targeted module ({small}): a rank is at most"
                       f" min(in, out) of each target")
    if m.linears_assumed:
        notes["lora_names"] = (f"LoRA targets matched on the usual module names for {m.name} (its own code is not"
                               " read: give --model with a folder holding its config.json to match its own)")
    if ft.quantized:
        notes["qlora"] = ("QLoRA: the base in 4-bit NF4 with double quantization (BitsAndBytesConfig(load_in_4bit=True,"
                          " bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True)), the output head and norms"
                          " unquantized")
    return ft


def linear_names(m) -> list[str]:
    """The model's Linear modules by the short names PEFT's target_modules take (each path's last part)."""
    return sorted({lin.name.rpartition(".")[2] for lin in m.linears})


def targeted(m, ft: Finetune) -> list:
    """The model's Linear modules the adapters go on: those matching a target name (PEFT's rule: the whole path or
    its last dotted parts), or every one but the output head for all-linear. A name matching none is refused."""
    if not ft.peft:
        return []
    if ALL_LINEAR in ft.targets:
        if len(ft.targets) > 1:
            raise BadInput(f"--lora-targets {ALL_LINEAR} means every Linear module but the output head: give it alone")
        return [lin for lin in m.linears if lin.stage != "head"]
    missing = [t for t in ft.targets if not any(lin.matches(t) for lin in m.linears)]
    if missing:
        raise BadInput(f"--lora-targets {','.join(missing)}: {m.name} has no such Linear module (it has"
                       f" {', '.join(linear_names(m))}; or {ALL_LINEAR})")
    return [lin for lin in m.linears if any(lin.matches(t) for t in ft.targets)]


def adapter_params(m, ft: Finetune) -> int:
    """Parameters of the adapters: r x (in + out) per targeted module."""
    return sum(ft.rank * (lin.fan_in + lin.fan_out) * lin.count for lin in targeted(m, ft))


def trainable(m, ft: Finetune) -> int:
    """Parameters that get gradients and optimizer states: the whole model, or the adapters."""
    return adapter_params(m, ft) if ft.peft else m.params


def trainable_tensors(m, ft: Finetune) -> int | None:
    """Parameter tensors the optimizer steps under PEFT (A and B per targeted module); None: the model's own."""
    return sum(2 * lin.count for lin in targeted(m, ft)) if ft.peft else None


QUANTIZERS = ("transformers", "lightning")   # --quantizer: what quantizes QLoRA's base


def quantized(m, head: bool = False) -> list:
    """The Linear modules bitsandbytes quantizes: every one but the output head (transformers'
    get_keys_to_not_convert keeps the output embeddings, tied weights and the last module); with `head` (Lightning
    Fabric's BitsandbytesPrecision, which replaces every torch.nn.Linear: quantizes_head) the head too."""
    return [lin for lin in m.linears if head or lin.stage != "head"]


def quantizes_head(t) -> bool:
    """QLoRA quantized as Lightning Fabric's BitsandbytesPrecision does (--quantizer lightning, litgpt's --quantize
    bnb.*): its init context replaces every torch.nn.Linear, the output head included, with a bitsandbytes
    Linear4bit (_ClassReplacementContextManager({"torch.nn.Linear": ...}) in
    src/lightning/fabric/plugins/precision/bitsandbytes.py of Lightning 2.1 to 2.4)."""
    return getattr(t, "quantizer", "transformers") == "lightning" and getattr(t, "finetune", FULL).quantized


def head_elements(m) -> int:
    """Elements of the output head's weight (the LM head: vocabulary x hidden)."""
    return sum(lin.fan_in * lin.fan_out * lin.count for lin in m.linears if lin.stage == "head")


def nf4_bytes(elements: int, double_quant: bool = True) -> int:
    """One tensor's bytes as bitsandbytes stores it in NF4 (quantize_4bit, blocksize 64): the packed weight (two
    values a byte), one absmax per block (fp32; with double quantization uint8, plus an fp32 absmax per 256 blocks and
    the 256-entry fp32 code), and the 16-entry NF4 code."""
    blocks = math.ceil(elements / NF4_BLOCK)
    absmax = blocks + 4 * math.ceil(blocks / NESTED_BLOCK) + 4 * 256 if double_quant else 4 * blocks
    return math.ceil(elements / 2) + absmax + 4 * 16


def base_bytes(m, ft: Finetune, weight: int, kept: int | None = None, head: bool = False) -> int:
    """Bytes of the frozen base, whole: `weight` bytes a parameter (16-bit, or fp32 without mixed precision); for
    QLoRA its Linear modules in NF4 and the rest at `kept` bytes (fp32 where prepare_model_for_kbit_training upcasts
    them, as TRL and the QLoRA recipe call it; the weight's bytes otherwise). `head`: the output head quantized too
    (quantizes_head); a tied embedding then stays beside it, whole (the head's Linear4bit holds its own NF4 copy)."""
    if not ft.quantized:
        return weight * m.params
    q = quantized(m, head)
    n = sum(lin.fan_in * lin.fan_out * lin.count for lin in q)
    nf4 = sum(nf4_bytes(lin.fan_in * lin.fan_out) * lin.count for lin in q)
    rest = m.params - n + (head_elements(m) if head and m.tied else 0)
    return nf4 + (weight if kept is None else kept) * rest


def unit_bytes(m, ft: Finetune, base: int, block: int, root: int, kept: int,
               head: bool = False) -> tuple[int, int]:
    """(bytes of one block's base, of the root's) out of the base's `base` bytes, for FSDP's units of `block` and
    `root` parameters: the root (embeddings, head) is not quantized (`kept` bytes a parameter; with `head`, the
    head in NF4 beside the embedding), so QLoRA's blocks hold the NF4 rest."""
    if not ft.quantized:
        return int(base * block / max(m.params, 1)), int(base * root / max(m.params, 1))
    if head:
        lm = head_elements(m)
        root_bytes = kept * (root - (0 if m.tied else lm)) + nf4_bytes(lm)
    else:
        root_bytes = kept * root
    return int(max(0, base - root_bytes) / max(m.layers, 1)), root_bytes


def per_block(m, ft: Finetune) -> list:
    """(targeted module, how many of it a block holds) for the targets inside the blocks (the head and modules
    outside the blocks excluded)."""
    return [(lin, lin.count / max(m.layers, 1)) for lin in targeted(m, ft) if "*" in lin.name]


def block_adapters(m, ft: Finetune) -> float:
    """Adapter parameters in one block (on average: T5's encoder and decoder blocks differ)."""
    return sum(n * ft.rank * (lin.fan_in + lin.fan_out) for lin, n in per_block(m, ft))


def largest_adapter(m, ft: Finetune) -> int:
    """Elements of the largest adapter tensor (an optimizer's for-loop temporaries are its size)."""
    return max((ft.rank * max(lin.fan_in, lin.fan_out) for lin in targeted(m, ft)), default=0)


def half_base(ft: Finetune, t) -> bool:
    """The base itself is 16-bit, so is the residual stream it carries: LoRA in mixed precision loads the base in
    the compute dtype (torch_dtype=torch.bfloat16, as PEFT's examples and TRL do); QLoRA's unquantized modules stay
    16-bit only with --pure-16bit (prepare_model_for_kbit_training upcasts them to fp32)."""
    return ft.mode == "lora" and t.precision != "fp32"


def outside_blocks(m, ft: Finetune) -> list:
    """Targeted modules outside the blocks (an output head named explicitly, BERT's MLM transform)."""
    return [lin for lin in targeted(m, ft) if "*" not in lin.name]


def saved_bytes(m, ft: Finetune, T: int, stream: dict, autocast: bool, adapter: int, mask: int,
                linears=None) -> float:
    """Bytes autograd keeps for the adapters of `linears` (default: one block's), as PEFT's Linear.forward runs them:
    x cast to the adapter's dtype (a new tensor where they differ), dropout (its mask, and its output that lora_A
    keeps), lora_A (its input kept for A's gradient: under autocast, its own 16-bit cast), lora_B (the r-wide
    intermediate kept for B's gradient, in the compute dtype). Without a cast or dropout lora_A keeps x itself, the
    same tensor for every target reading it (one per stage). stream: bytes of x where each stage's modules read it
    (memory.adapter_bytes); mask: bytes of a dropout mask element (1 on CUDA, the input's on CPU)."""
    pairs = per_block(m, ft) if linears is None else [(lin, 1) for lin in linears]
    compute = 2 if autocast else adapter
    total, shared = 0.0, set()
    for lin, n in pairs:
        inter = T * ft.rank * compute
        if autocast:
            kept = T * lin.fan_in * ((mask if ft.dropout else 0) + 2)
        elif ft.dropout:
            kept = T * lin.fan_in * (mask + adapter)
        elif stream[lin.stage] != adapter:
            kept = T * lin.fan_in * adapter
        else:
            kept = 0
            shared.add((lin.stage, lin.fan_in))
        total += n * (kept + inter)
    return total + sum(T * fan_in * stream[stage] for stage, fan_in in shared)


def adapter_dtype_bytes(t, deepspeed: bool) -> int:
    """Bytes of an adapter weight: PEFT upcasts 16-bit adapters to fp32 (get_peft_model's autocast_adapter_dtype=True);
    16 bits with --pure-16bit (torchtune, litgpt, fsdp_qlora) and under DeepSpeed, whose engine casts the model to its
    16-bit dtype and keeps the fp32 master in its optimizer."""
    return t.value_bytes if t.pure16 or (deepspeed and t.precision != "fp32") else 4
