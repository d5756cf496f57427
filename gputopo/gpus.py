"""Known GPU models: memory as sold and printed, and the architecture (which decides bf16). Pure data.

Memory per card in MiB. Where a real `nvidia-smi --query-gpu=memory.total` figure is on record it is used
(source in the comment); otherwise the size as sold, in binary units (an "NN GB" card is NN GiB), which
nvidia-smi prints within a few per cent (H100 80GB: 81559 MiB of 81920).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

BF16_ARCHS = ("Ampere", "Ada", "Hopper", "Blackwell")  # bf16 tensor cores from compute capability 8.0
GIB_MIB = 1024

# (key users type, pattern on the squeezed upper-case name, architecture, {GB as sold: MiB (None: as sold)})
# First match wins, so longer names come before their prefixes (L40S before L40, A100 before A10).
CATALOG = (
    ("GB200", r"GB200", "Blackwell", {186: None}),
    ("B200", r"B200", "Blackwell", {180: None, 192: None}),
    ("RTX 5090", r"RTX5090", "Blackwell", {32: None}),
    ("GH200", r"GH200", "Hopper", {96: None, 144: None}),
    ("H200", r"H200", "Hopper", {141: None}),
    ("H100 NVL", r"H100NVL", "Hopper", {94: None}),
    ("H100", r"H100", "Hopper", {80: 81559}),   # 81559 MiB: H100 80GB HBM3, nvidia-smi (issue 14)
    ("H800", r"H800", "Hopper", {80: None}),
    ("H20", r"H20(?!0)", "Hopper", {96: None}),
    ("A100", r"A100", "Ampere", {40: None, 80: 81920}),  # 81920 MiB: A100-SXM4-80GB, nvidia-smi (issue 14)
    ("A800", r"A800", "Ampere", {40: None, 80: None}),
    ("A40", r"A40(?!\d)", "Ampere", {48: None}),
    ("A30", r"A30(?!\d)", "Ampere", {24: None}),
    ("A10G", r"A10G", "Ampere", {24: None}),
    ("A10", r"A10(?![0-9G])", "Ampere", {24: None}),
    ("L40S", r"L40S", "Ada", {48: None}),
    ("L40", r"L40(?!S)", "Ada", {48: None}),
    ("L4", r"L4(?!\d)", "Ada", {24: None}),
    ("RTX 6000 Ada", r"RTX6000ADA", "Ada", {48: None}),
    ("RTX 4090", r"RTX4090", "Ada", {24: 24564}),        # 24564 MiB: GeForce RTX 4090, nvidia-smi (issue 14)
    ("RTX 4080", r"RTX4080", "Ada", {16: None}),
    ("RTX A6000", r"RTXA6000|^A6000", "Ampere", {48: None}),
    ("RTX A5000", r"RTXA5000|^A5000", "Ampere", {24: None}),
    ("RTX 3090", r"RTX3090", "Ampere", {24: None}),
    ("RTX 3080", r"RTX3080", "Ampere", {10: None, 12: None}),
    ("V100", r"V100", "Volta", {16: 16160, 32: None}),    # 16160 MiB: Tesla V100 16GB, docs/sources.md#cuda-context
    ("TITAN V", r"TITANV", "Volta", {12: None}),
    ("TITAN RTX", r"TITANRTX", "Turing", {24: None}),
    ("Quadro RTX 8000", r"RTX8000", "Turing", {48: None}),
    ("Quadro RTX 6000", r"(?:QUADRO)?RTX6000$", "Turing", {24: None}),
    ("RTX 2080 Ti", r"RTX2080TI", "Turing", {11: None}),
    ("T4", r"(?<![A-Z0-9])T4(?!\d)", "Turing", {16: None}),
    ("P100", r"P100", "Pascal", {12: None, 16: None}),
    ("P40", r"P40(?!\d)", "Pascal", {24: None}),
    ("GTX 1080 Ti", r"GTX1080TI", "Pascal", {11: None}),
)
KNOWN = tuple(k for k, *_ in CATALOG)
# Sizes a model also comes in that its name need not say (GB): an "NVIDIA H100 96GB" board (torchtitan's H100 runs
# were on "NVIDIA H100 96GB HBM2e (Grand Teton, 500W power limit)"): --gpu-mem 96GB on an H100 is no MIG slice.
ALSO_SOLD = {"H100": (96,)}
# NVLinks per GPU, so a matrix claiming more is flagged. Data-center parts: NVLink generations 1-5 (P100 4,
# V100 6, A100 12, H100/H200/B200 18; the China-market A800/H800 8): https://www.nvidia.com/en-us/data-center/nvlink/
# Bridged desktop/workstation boards: TU102 2 links (TITAN RTX, RTX 8000), GA102 4
# (docs/sources.md#nvlink-ga102-bandwidth).
# Ada and Turing T4 boards have none.
NVLINKS = {"P100": 4, "V100": 6, "A100": 12, "A800": 8, "H100": 18, "H200": 18, "H800": 8, "GH200": 18,
           "B200": 18, "GB200": 18, "TITAN RTX": 2, "Quadro RTX 8000": 2, "RTX 3090": 4, "RTX A6000": 4, "A40": 4,
           "RTX 4090": 0, "RTX 4080": 0, "L40S": 0, "L40": 0, "L4": 0, "RTX 6000 Ada": 0, "T4": 0}


@dataclass(frozen=True)
class GpuModel:
    """A GPU name matched to its catalog entry: the architecture and, where the name says, the memory."""
    name: str                    # as the user or nvidia-smi wrote it
    key: str                     # the catalog entry: "A100", "RTX 4090"
    arch: str
    memory_bytes: int | None     # None when the name does not say which variant (A100 40GB or 80GB)
    memory_basis: str            # "nvidia-smi" or "as sold"
    variants: tuple[int, ...]    # GB sizes the model is sold in

    @property
    def bf16(self) -> bool:
        return self.arch in BF16_ARCHS

    def __str__(self) -> str:
        return self.name


# A size in a GPU's name: ASCII digits, as many as a size has (no GPU has 10**6 GB), so int() never meets the 4,301
# digits it refuses (a fleet report's name is another machine's text); a longer run is no size.
SIZE_IN_NAME = re.compile(r"(?<![\w.])([0-9]{1,6})\s*G(?:i?B)?\b", re.I | re.ASCII)


def _squeeze(name: str) -> str:
    up = re.sub(r"\b(NVIDIA|GEFORCE|TESLA)\b", "", name.upper())
    return re.sub(r"[^A-Z0-9]", "", up)


def lookup(name: str | None, strict: bool = False) -> GpuModel | None:
    """The catalog's entry for a GPU name ('A100-80GB', 'NVIDIA H100 80GB HBM3', 'rtx4090'), or None.

    strict: a size the model is not sold in is an error (ValueError), as for a name the user typed; a name
    NVML or a paste reports keeps its architecture and leaves the memory to what the driver says."""
    if not name or not name.strip():
        return None
    # The size in the name ("-80GB", " 80GB HBM3"), taken before squeezing so "SXM4-80GB" is not "480GB".
    gb = SIZE_IN_NAME.search(name)
    squeezed = _squeeze(name[:gb.start()] if gb else name)
    for key, pattern, arch, variants in CATALOG:
        if re.search(pattern, squeezed):
            sizes = tuple(sorted(variants))
            if gb and int(gb.group(1)) in variants:
                chosen = int(gb.group(1))
            elif gb and strict:
                raise ValueError(f"{name}: {key} is sold as {_sizes(sizes)}, not {gb.group(1)}GB")
            elif len(variants) == 1 and not gb:
                chosen = sizes[0]
            else:
                return GpuModel(name, key, arch, None, "unknown", sizes)
            mib = variants[chosen]
            return GpuModel(name, key, arch, (mib or chosen * GIB_MIB) * 2 ** 20,
                            "nvidia-smi" if mib else "as sold", sizes)
    return None


def _sizes(sizes: tuple[int, ...]) -> str:
    return " or ".join(f"{s}GB" for s in sizes)


# What a GPU's full name says beside its model and size, as NVML and nvidia-smi print it ("NVIDIA A100-SXM4-80GB",
# "Tesla P100-PCIE-16GB", "NVIDIA H100 80GB HBM3", "NVIDIA RTX 6000 Ada Generation", "NVIDIA H200 NVL"): the brand,
# the board's form and its memory. A typed name that says anything else ("H100-FOO", "H100 XYZ") is not the model.
NAME_EXTRAS = re.compile(r"(?:NVIDIA|GEFORCE|TESLA|QUADRO|SXM[0-9]?|PCIE|HBM[0-9]?E?|GENERATION|NVL)*")
TYPED_NAME = re.compile(r"[A-Za-z0-9 ._()-]+")   # ASCII: upper() makes "ß" "SS", and the squeeze dropped "é"


def known(name: str) -> GpuModel:
    """lookup() that refuses an unknown name in one line naming the known ones (ValueError): a name the user typed
    is the catalog's model, with at most a size and what a full name says beside it (NAME_EXTRAS)."""
    found = lookup(name, strict=True)
    if found is not None and TYPED_NAME.fullmatch(name):
        gb = SIZE_IN_NAME.search(name)
        rest = _squeeze(name[:gb.start()] + name[gb.end():] if gb else name)
        model = re.search(next(p for k, p, *_ in CATALOG if k == found.key), rest)
        if NAME_EXTRAS.fullmatch(rest[:model.start()] + rest[model.end():]):
            return found
    raise ValueError(f"{name}: unknown GPU model; known: {', '.join(KNOWN)}")


# Pre-Ampere names NVML may report that the catalog does not list (bf16 needs compute capability 8.0).
PRE_AMPERE = r"V100|P100|P40|P4\b|T4\b|K80|M60|TITAN (RTX|V|Xp|X)|GTX|RTX 20\d\d|Quadro|Tesla [KMP]"


def max_nvlinks(name: str | None) -> int | None:
    """How many NVLinks this GPU model has; None when unknown."""
    found = lookup(name) if name else None
    return NVLINKS.get(found.key) if found else None


def supports_bf16(name: str | None) -> bool | None:
    """bf16 support (Ampere or newer): the catalog's entry, else pre-Ampere names by pattern; None when unnamed."""
    if not name:
        return None
    found = lookup(str(name))
    return found.bf16 if found else not re.search(PRE_AMPERE, str(name), re.I)
