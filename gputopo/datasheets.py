"""Datasheet figures per GPU catalog key (gputopo.gpus), the peaks gputopo.speed starts from. Pure data.


Units and conventions
- fp32:  plain FP32 on CUDA cores (non-tensor), TFLOPS.
- tf32:  TF32 tensor core, DENSE (no 2:4 sparsity), TFLOPS. None before Ampere (no TF32).
- b16:   FP16/BF16 tensor core, DENSE, FP32 accumulate where the source distinguishes (GeForce cards run
         FP32-accumulate at half the FP16-accumulate rate; that lower figure is the one given). Pre-Volta
         (no tensor cores): the plain FP16 rate where it is a real fast path (P100), else None.
- mem_gbps:    memory bandwidth, GB/s, as the source states it.
- nvlink_gbps: NVLink bandwidth per LINK per DIRECTION, GB/s; None when the board has no NVLink.
               (Datasheets quote the total over all links, both directions: per-link = total / links / 2.)
- pcie:  (generation, lanes) of the host link; None where the GPU's host link is NVLink-C2C, not PCIe.
- boost_mhz: the boost clock the peak figures assume, where the source states it; None otherwise.
- Datasheets print tensor figures "with sparsity" (marked *); dense = half of that. Every tensor figure
  below is the dense one; where it was halved from a sparse figure the note says so.
- SXM figures for A100/H100/H200/B200 keys; VARIANTS holds the other forms and memory sizes where a figure
  differs (sheet() picks one from the name nvidia-smi or the user gives, and the memory).
"""
from __future__ import annotations

import re

PEAKS = {
    "GB200": dict(  # per Blackwell GPU in a GB200 superchip (1 Grace + 2 GPUs)
        fp32=80.0, tf32=1250.0, b16=2500.0, mem_gbps=8000.0, nvlink_gbps=50.0, pcie=(5, 16), boost_mhz=None,
        source="https://www.nvidia.com/en-us/data-center/gb200-nvl72/",
        note="Superchip column halved: FP32 160 TF, TF32 5 PF*, FP16/BF16 10 PF* (sparse), 16 TB/s, NVLink 3.6 TB/s"
             " -> per GPU 80 / 1250 / 2500 dense / 8000 GB/s / 1.8 TB/s = 18 NVLink5 links x 50 GB/s/dir."
             " Earlier revision of the page gave FP32 180 TF per superchip (90 per GPU), FP64 90 (now 80)."
             " Host link to Grace is NVLink-C2C (900 GB/s); the datasheet also prints 'PCIe Gen5: 128 GB/s' per GPU."
             " Clock not stated.",
    ),
    "B200": dict(  # HGX/DGX B200 (SXM, 1000 W)
        fp32=75.0, tf32=1100.0, b16=2250.0, mem_gbps=7700.0, nvlink_gbps=50.0, pcie=(5, 16), boost_mhz=None,
        source="https://www.nvidia.com/en-us/data-center/hgx/",
        note="HGX B200 per GPU (the datasheet's column): FP32 75 TF, TF32 2.2 PF*, FP16/BF16 4.5 PF* -> 75 / 1100 /"
             " 2250 dense, 180 GB HBM3E at 7.7 TB/s (the DGX B200 page's 64 TB/s per 8 = 8000 is GB200's figure)."
             " NVLink5 1.8 TB/s = 18 x 50 GB/s/dir. Tech brief lists PCIe"
             " Gen5 for HGX B200 (some third-party pages say Gen6). No PCIe-card B200. Clock not stated.",
    ),
    "RTX 5090": dict(
        fp32=104.8, tf32=104.8, b16=209.5, mem_gbps=1792.0, nvlink_gbps=None, pcie=(5, 16), boost_mhz=2407,
        source="https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/"
               "nvidia-rtx-blackwell-gpu-architecture.pdf",
        note="RTX Blackwell whitepaper: FP16 tensor w/ FP32 accumulate 209.5 dense (419 sparse); w/ FP16"
             " accumulate 419 dense. TF32 104.8 dense. 170 SMs, GDDR7 28 Gbps x 512-bit. No NVLink.",
    ),
    "GH200": dict(  # the Hopper GPU of a GH200 Grace Hopper superchip
        fp32=67.0, tf32=494.7, b16=989.4, mem_gbps=4000.0, nvlink_gbps=25.0, pcie=None, boost_mhz=1980,
        source="https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
        note="Datasheet (resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip) gives H100-SXM compute:"
             " FP32 67, TF32 989*, BF16 1979* (sparse) -> 494.7 / 989.4 dense. 96 GB HBM3 at 4000 GB/s; the"
             " 144 GB HBM3e version has 4900 GB/s. NVLink4 18 x 25 GB/s/dir (900 GB/s) for NVLink-switch"
             " systems; host link is NVLink-C2C 900 GB/s to Grace, not PCIe. Clock as H100 SXM5."
             " NOT re-read from the PDF this session (search tool had no copy): figures from memory + H100.",
    ),
    "H200": dict(  # H200 SXM5 141 GB
        fp32=67.0, tf32=494.7, b16=989.4, mem_gbps=4800.0, nvlink_gbps=25.0, pcie=(5, 16), boost_mhz=1980,
        source="https://www.nvidia.com/en-us/data-center/h200/",
        note="Datasheet: TF32 989*, BF16 1979* (sparse) -> dense 494.7 / 989.4 (same GH100 silicon as H100 SXM5)."
             " NVLink4 900 GB/s = 18 x 25 GB/s/dir. PCIe variant H200 NVL: FP32 60, TF32 417.5, BF16 835.5 dense"
             " (835*/1671*), 4800 GB/s on the product page but 4200 GB/s in the H200 datasheet; NVLink bridge"
             " 900 GB/s per GPU (2- or 4-way). Clocks: FP32 at 1980 MHz, tensor figures at 1830 MHz.",
    ),
    "H100 NVL": dict(  # 94 GB HBM3 PCIe card, sold in bridged pairs
        fp32=60.0, tf32=417.5, b16=835.5, mem_gbps=3900.0, nvlink_gbps=25.0, pcie=(5, 16), boost_mhz=None,
        source="https://resources.nvidia.com/en-us-gpu-resources/h100-datasheet-24306",
        note="H100 datasheet, NVL column: FP32 60, TF32 835*, BF16 1671* (sparse) -> dense 417.5 / 835.5;"
             " 94 GB, 3.9 TB/s; NVLink bridge 600 GB/s = 12 x 25 GB/s/dir. An early (2023) datasheet quoted"
             " the pair of cards (188 GB, 7.8 TB/s, FP32 134): do not mix the two. Clock not stated.",
    ),
    "H100": dict(  # H100 SXM5 80 GB HBM3
        fp32=67.0, tf32=494.7, b16=989.4, mem_gbps=3350.0, nvlink_gbps=25.0, pcie=(5, 16), boost_mhz=1980,
        source="https://resources.nvidia.com/en-us-gpu-resources/h100-datasheet-24306",
        note="Datasheet: FP32 67, TF32 989*, BF16 1979* (sparse) -> dense 494.7 / 989.4 (Hopper whitepaper:"
             " FP32 66.9 at 1980 MHz, tensor 989.4 at 1830 MHz). NVLink4 18 x 25 GB/s/dir = 900 GB/s."
             " PCIe variant (H100 PCIe 80 GB, 114 SMs): FP32 51, TF32 378, BF16 756 dense, 2000 GB/s (HBM2e),"
             " NVLink bridge 600 GB/s.",
    ),
    "H800": dict(  # H800 SXM5 80 GB (China export variant of H100)
        fp32=67.0, tf32=494.7, b16=989.4, mem_gbps=3350.0, nvlink_gbps=25.0, pcie=(5, 16), boost_mhz=1980,
        source="https://www.techpowerup.com/gpu-specs/h800-sxm5.c3975",
        note="NVIDIA publishes no H800 datasheet; figures are third-party (TechPowerUp, OEM pages): H100 SXM5"
             " compute and memory, NVLink cut to 400 GB/s = 8 links x 25 GB/s/dir; FP64 reportedly cut to"
             " ~1 TF. PCIe variant (H800 PCIe 80 GB, techpowerup c4181): H100-PCIe compute (FP32 51, BF16 756"
             " dense), ~2000 GB/s, NVLink bridge 400 GB/s.",
    ),
    "H20": dict(  # China export variant, 78 SMs, 96 GB HBM3
        fp32=44.0, tf32=74.0, b16=148.0, mem_gbps=4000.0, nvlink_gbps=25.0, pcie=(5, 16), boost_mhz=None,
        source="https://www.techpowerup.com/gpu-specs/h20.c4420",
        note="No NVIDIA datasheet. Widely reported spec: FP32 44, TF32 74, BF16/FP16 148, FP8/INT8 296, 96 GB"
             " at 4.0 TB/s, NVLink 900 GB/s (18 x 25), PCIe Gen5 x16, 400 W. Read as DENSE: equal TPP across"
             " precisions (148x16 = 296x8 = 74x32) fits the export-rule design; some tables mark 296 as"
             " sparse, which would halve the tensor figures. TechPowerUp id c4420 seen in one citation only.",
    ),
    "A100": dict(  # A100 SXM4 80 GB
        fp32=19.5, tf32=156.0, b16=312.0, mem_gbps=2039.0, nvlink_gbps=25.0, pcie=(4, 16), boost_mhz=1410,
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
               "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        note="Datasheet: TF32 156 | 312*, BF16 312 | 624* (first value dense). SXM4 80 GB 2039 GB/s,"
             " SXM4 40 GB 1555 GB/s. NVLink3 600 GB/s = 12 x 25 GB/s/dir. PCIe variant: same FLOPS,"
             " 80 GB PCIe 1935 GB/s, 40 GB PCIe 1555 GB/s, NVLink bridge (2 GPUs) 600 GB/s.",
    ),
    "A800": dict(  # A800 SXM4 80 GB (China export variant of A100)
        fp32=19.5, tf32=156.0, b16=312.0, mem_gbps=2039.0, nvlink_gbps=25.0, pcie=(4, 16), boost_mhz=1410,
        source="https://www.techpowerup.com/gpu-specs/a800-sxm4-80-gb.c3966",
        note="A100 compute and memory with NVLink cut to 400 GB/s = 8 x 25 GB/s/dir. NVIDIA's only published"
             " A800 page is the A800 40GB Active PCIe card (nvidia.com/en-us/products/workstations/a800/):"
             " FP32 19.5, 623.8 TF* sparse tensor (311.9 dense), 1555.2 GB/s, NVLink bridge 400 GB/s, 240 W."
             " A800 PCIe 80 GB (techpowerup c3965): ~1935 GB/s.",
    ),
    "A40": dict(
        fp32=37.4, tf32=74.8, b16=149.7, mem_gbps=696.0, nvlink_gbps=14.0625, pcie=(4, 16), boost_mhz=1740,
        source="https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf",
        note="Datasheet / GA102 whitepaper v2: TF32 74.8 | 149.6*, BF16 and FP16 w/ FP32 accumulate"
             " 149.7 | 299.4* (full rate, not GeForce-halved). NVLink 112.5 GB/s bidirectional over the"
             " 2-way bridge = 4 x4 links x 14.0625 GB/s/dir.",
    ),
    "A30": dict(
        fp32=10.3, tf32=82.0, b16=165.0, mem_gbps=933.0, nvlink_gbps=25.0, pcie=(4, 16), boost_mhz=1440,
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/products/a30-gpu/pdf/"
               "a30-datasheet.pdf",
        note="Datasheet: TF32 82 | 165*, BF16 165 | 330* (first value dense). NVLink3 bridge 200 GB/s"
             " bidirectional = 4 x 25 GB/s/dir (2 GPUs). Boost 1440 MHz is TechPowerUp's, not the datasheet's.",
    ),
    "A10G": dict(  # AWS-only GA102 variant (G5 instances)
        fp32=35.0, tf32=35.0, b16=70.0, mem_gbps=600.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=1710,
        source="https://d1.awsstatic.com/product-marketing/ec2/NVIDIA_AWS_A10G_DataSheet_FINAL_02_17_2022.pdf",
        note="NVIDIA's A10G datasheet (hosted by AWS), as quoted by several users: FP32 35, BF16/FP16 tensor"
             " 70 dense (140 sparse); TF32 35 taken from the same table. 80 SMs (pycuda reports 80)."
             " TechPowerUp (a10g.c3798) lists 72 SMs / 31.52 TF, which looks wrong. A measured bf16 matmul"
             " reached 66.6 TF, under 70. Not the A10's 125: A10G halves FP32-accumulate like GeForce.",
    ),
    "A10": dict(
        fp32=31.2, tf32=62.5, b16=125.0, mem_gbps=600.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=1695,
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf",
        note="Datasheet: TF32 62.5 | 125*, BF16 125 | 250* (first value dense). 72 SMs. Boost 1695 MHz is"
             " TechPowerUp's (a10-pcie), not printed in the datasheet.",
    ),
    "L40S": dict(
        fp32=91.6, tf32=183.0, b16=362.05, mem_gbps=864.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=2520,
        source="https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
        note="Datasheet: TF32 183 | 366*, BF16/FP16 362.05 | 733* (first value dense; the product page shows"
             " only the sparse 733). 142 SMs.",
    ),
    "L40": dict(
        fp32=90.5, tf32=90.5, b16=181.05, mem_gbps=864.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=2490,
        source="https://images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf",
        note="Datasheet: TF32 90.5 | 181*, BF16/FP16 181.05 | 362.1* (first value dense). 142 SMs.",
    ),
    "L4": dict(
        fp32=30.3, tf32=60.0, b16=121.0, mem_gbps=300.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=2040,
        source="https://nvdam.widen.net/s/rvq98gbwsw/l4-datasheet-2595652",
        note="Datasheet prints sparse only: TF32 120*, BF16/FP16 242* -> dense 60 / 121. 58 SMs. 72 W,"
             " low-profile. Boost 2040 MHz from the Ada whitepaper tables / TechPowerUp.",
    ),
    "RTX 6000 Ada": dict(
        fp32=91.1, tf32=182.1, b16=364.2, mem_gbps=960.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=2505,
        source="https://images.nvidia.com/aem-dam/en-zz/Solutions/technologies/"
               "NVIDIA-ADA-GPU-PROVIZ-Architecture-Whitepaper_1.1.pdf",
        note="Ada ProViz whitepaper: TF32 182.1 dense, FP16/BF16 w/ FP32 accumulate 364.2 dense (728.5*;"
             " full rate on the pro card). Datasheet headline '1457 TFLOPS' is FP8 sparse. No NVLink.",
    ),
    "RTX 4090": dict(
        fp32=82.6, tf32=82.6, b16=165.2, mem_gbps=1008.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=2520,
        source="https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
        note="Ada whitepaper: FP16 tensor w/ FP32 accumulate 165.2 dense (330.4*); w/ FP16 accumulate 330.3"
             " dense. TF32 82.6 dense. No NVLink.",
    ),
    "RTX 4080": dict(
        fp32=48.7, tf32=48.7, b16=97.5, mem_gbps=716.8, nvlink_gbps=None, pcie=(4, 16), boost_mhz=2505,
        source="https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
        note="Ada whitepaper: FP16 tensor w/ FP32 accumulate 97.5 dense (194.9*); w/ FP16 accumulate 194.9"
             " dense. 76 SMs, 22.4 Gbps x 256-bit = 716.8 GB/s. No NVLink.",
    ),
    "RTX A6000": dict(
        fp32=38.7, tf32=77.4, b16=154.8, mem_gbps=768.0, nvlink_gbps=14.0625, pcie=(4, 16), boost_mhz=1800,
        source="https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
        note="GA102 whitepaper v2, Appendix C: TF32 77.4 dense, FP16/BF16 w/ FP32 accumulate 154.8 dense"
             " (309.7*; full rate on the pro card). NVLink 112.5 GB/s bidirectional = 4 x 14.0625 GB/s/dir.",
    ),
    "RTX A5000": dict(
        fp32=27.8, tf32=55.6, b16=111.1, mem_gbps=768.0, nvlink_gbps=14.0625, pcie=(4, 16), boost_mhz=1695,
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/products/workstations/"
               "nvidia-rtx-a5000-datasheet.pdf",
        note="Datasheet prints 'Tensor performance 222.2 TFLOPS' (sparse) -> 111.1 dense; TF32 55.6 derived"
             " as half (A6000 ratio), not printed. 64 SMs. NVLink 112.5 GB/s bidirectional = 4 x 14.0625."
             " Boost 1695 MHz from TechPowerUp.",
    ),
    "RTX 3090": dict(
        fp32=35.6, tf32=35.6, b16=71.0, mem_gbps=936.0, nvlink_gbps=14.0625, pcie=(4, 16), boost_mhz=1695,
        source="https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
        note="GA102 whitepaper, Appendix A: FP16 tensor w/ FP32 accumulate 71 dense (142*); w/ FP16"
             " accumulate 142 dense. TF32 35.6 dense. NVLink (GA102: 4 x4 links) 112.5 GB/s bidirectional"
             " = 14.0625 GB/s per link per direction.",
    ),
    "RTX 3080": dict(  # 10 GB
        fp32=29.8, tf32=29.8, b16=59.5, mem_gbps=760.0, nvlink_gbps=None, pcie=(4, 16), boost_mhz=1710,
        source="https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
        note="GA102 whitepaper: FP16 tensor w/ FP32 accumulate 59.5 dense (119*). 68 SMs, 10 GB 19 Gbps x"
             " 320-bit = 760 GB/s. The later 12 GB card (70 SMs, 384-bit) has 912 GB/s and ~30.6 TF FP32"
             " (TechPowerUp, not in the whitepaper). No NVLink.",
    ),
    "V100": dict(  # Tesla V100 SXM2 (16 or 32 GB)
        fp32=15.7, tf32=None, b16=125.0, mem_gbps=900.0, nvlink_gbps=25.0, pcie=(3, 16), boost_mhz=1530,
        source="https://images.nvidia.com/content/technologies/volta/pdf/"
               "tesla-volta-v100-datasheet-letter-fnl-web.pdf",
        note="Datasheet: SXM2 FP32 15.7, tensor (FP16 in, FP32 accumulate) 125, 900 GB/s for 16 and 32 GB."
             " NVLink2 300 GB/s = 6 x 25 GB/s/dir. PCIe variant: FP32 14, tensor 112, 900 GB/s, no NVLink."
             " (V100S PCIe: 16.4 / 130 / 1134 GB/s.) No bf16, no TF32.",
    ),
    "TITAN V": dict(
        fp32=14.9, tf32=None, b16=110.0, mem_gbps=652.8, nvlink_gbps=None, pcie=(3, 16), boost_mhz=1455,
        source="https://www.techpowerup.com/gpu-specs/titan-v.c3051",
        note="FP32 14.9 at 1455 MHz (TechPowerUp). Tensor 110 TF is NVIDIA's TITAN V marketing figure"
             " (640 TC x 128 FLOP x 1455 MHz would be 119.2); NVIDIA publishes no accumulate split for it."
             " Memory 1.7 Gbps x 3072-bit = 652.8 GB/s (NVIDIA); TechPowerUp lists 651.3. No NVLink.",
    ),
    "TITAN RTX": dict(
        fp32=16.3, tf32=None, b16=130.0, mem_gbps=672.0, nvlink_gbps=25.0, pcie=(3, 16), boost_mhz=1770,
        source="https://www.techpowerup.com/gpu-specs/titan-rtx.c3311",
        note="FP32 16.31, 672 GB/s, boost 1770 (TechPowerUp). 130 'Tensor TFLOPS' is NVIDIA's TITAN RTX page"
             " (nvidia.com/en-us/deep-learning-ai/products/titan-rtx/). CAUTION: the Turing whitepaper"
             " (Sept 2018) predates TITAN RTX and does not list it; that FP32 accumulate runs at the full 130"
             " (unlike 2080 Ti) rests on it being the full TU102 like Quadro RTX 6000 (130.5, 'FP16 or FP32"
             " accumulate' in its datasheet). NVLink2 2 x8 links, 100 GB/s bidirectional = 2 x 25 GB/s/dir.",
    ),
    "Quadro RTX 8000": dict(  # actively cooled board
        fp32=16.3, tf32=None, b16=130.5, mem_gbps=672.0, nvlink_gbps=25.0, pcie=(3, 16), boost_mhz=1770,
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/quadro-product-literature/"
               "quadro-rtx-8000-us-nvidia-946977-r1-web.pdf",
        note="Datasheet: FP32 16.3, 130.5 tensor TF ('FP16 matrix multiply with FP16 or FP32 accumulate'),"
             " 672 GB/s, NVLink 100 GB/s (2 links x 25 GB/s/dir). Passive server board: 14.9 / 119.4 / 624"
             " GB/s. Boost 1770 from the Turing whitepaper's Quadro RTX 6000 column (same TU102 config).",
    ),
    "Quadro RTX 6000": dict(  # actively cooled board
        fp32=16.3, tf32=None, b16=130.5, mem_gbps=672.0, nvlink_gbps=25.0, pcie=(3, 16), boost_mhz=1770,
        source="https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/"
               "turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf",
        note="Turing whitepaper Table 1: FP32 16.3, FP16 tensor w/ FP32 accumulate 130.5 (= FP16 accumulate),"
             " 672 GB/s, boost 1770. NVLink 100 GB/s = 2 x 25 GB/s/dir. Passive server board (datasheet"
             " quadro-rtx-6000-us-nvidia-704093-r4-web.pdf): 14.9 / 119.4 / 624 GB/s.",
    ),
    "RTX 2080 Ti": dict(  # reference clocks
        fp32=13.4, tf32=None, b16=53.8, mem_gbps=616.0, nvlink_gbps=25.0, pcie=(3, 16), boost_mhz=1545,
        source="https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/"
               "turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf",
        note="Turing whitepaper Table 1, reference 1545 MHz: FP32 13.4, FP16 tensor w/ FP32 accumulate 53.8"
             " (w/ FP16 accumulate 107.6). Founders Edition 1635 MHz: 14.2 / 56.9 / 113.8. NVLink2 2 x8 links,"
             " 100 GB/s bidirectional = 2 x 25 GB/s/dir.",
    ),
    "T4": dict(
        fp32=8.1, tf32=None, b16=65.0, mem_gbps=320.0, nvlink_gbps=None, pcie=(3, 16), boost_mhz=1590,
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/"
               "t4-tensor-core-datasheet-951643.pdf",
        note="Datasheet: FP32 8.1, mixed precision (FP16/FP32) 65, 320+ GB/s, 70 W. Boost 1590 MHz from"
             " TechPowerUp (tesla-t4.c3316). Sustained clocks under the 70 W cap are often lower.",
    ),
    "P100": dict(  # Tesla P100 SXM2 16 GB
        fp32=10.6, tf32=None, b16=21.2, mem_gbps=720.0, nvlink_gbps=20.0, pcie=(3, 16), boost_mhz=1480,
        source="https://developer.nvidia.com/blog/nvidia-ampere-architecture-in-depth/",
        note="NVIDIA's Ampere blog table (its P100 column): FP32 10.6, FP16 21.2 (2x rate, no tensor cores),"
             " 720 GB/sec (the Pascal whitepaper rounds it to 732), NVLink1"
             " 160 GB/s = 4 x 20 GB/s/dir. PCIe variant: FP32 9.3, FP16 18.7, 732 GB/s (16 GB) or 549 GB/s"
             " (12 GB), no NVLink. No bf16.",
    ),
    "P40": dict(
        fp32=12.0, tf32=None, b16=None, mem_gbps=346.0, nvlink_gbps=None, pcie=(3, 16), boost_mhz=1531,
        source="https://images.nvidia.com/content/pdf/tesla/184427-Tesla-P40-Datasheet-NV-Final-Letter-Web.pdf",
        note="Datasheet: FP32 12 TF (3840 cores x 2 x 1531 MHz = 11.76), INT8 47 TOPS, 346 GB/s. b16 None:"
             " GP102 runs FP16 at 1/64 rate (~0.18 TF, TechPowerUp), so 16-bit math is no faster than FP32.",
    ),
    "GTX 1080 Ti": dict(
        fp32=11.34, tf32=None, b16=None, mem_gbps=484.4, nvlink_gbps=None, pcie=(3, 16), boost_mhz=1582,
        source="https://www.techpowerup.com/gpu-specs/geforce-gtx-1080-ti.c2877",
        note="TechPowerUp: FP32 11.34 at 1582 MHz, 11 Gbps x 352-bit = 484.4 GB/s. b16 None: GP102 FP16 is"
             " 1/64 rate (0.177 TF). SLI bridge only, no NVLink.",
    ),
}

# Other forms and memory sizes of a key whose figures differ, each from the entry's own source (its note quotes
# them): "form" is matched on the upper-case name without spaces or dashes ("A100-PCIE-40GB", "H100 PCIe"),
# "mem_gb" against the memory (within 10 %). The first that matches wins, so the most specific comes first.
VARIANTS = {
    "A100": (dict(variant="A100 PCIe 40GB", form="PCIE", mem_gb=40, mem_gbps=1555.0),
             dict(variant="A100 PCIe 80GB", form="PCIE", mem_gb=80, mem_gbps=1935.0),
             dict(variant="A100 SXM4 40GB", mem_gb=40, mem_gbps=1555.0)),
    "A800": (dict(variant="A800 40GB PCIe", mem_gb=40, mem_gbps=1555.2),
             dict(variant="A800 PCIe 80GB", form="PCIE", mem_gb=80, mem_gbps=1935.0)),
    "H100": (dict(variant="H100 PCIe 80GB", form="PCIE", fp32=51.0, tf32=378.0, b16=756.0, mem_gbps=2000.0, sms=114),),
    "H800": (dict(variant="H800 PCIe 80GB", form="PCIE", fp32=51.0, tf32=378.0, b16=756.0, mem_gbps=2000.0, sms=114),),
    "V100": (dict(variant="V100 PCIe", form="PCIE", fp32=14.0, b16=112.0, nvlink_gbps=None),),
}


# Streaming multiprocessors per GPU (the whitepapers' tables, or the notes above): a matmul runs in waves of one
# tile per SM (gputopo.speed.wave_factor).
SMS = {"GB200": 148, "B200": 148, "RTX 5090": 170, "GH200": 132, "H200": 132, "H100 NVL": 132, "H100": 132,
       "H800": 132, "H20": 78, "A100": 108, "A800": 108, "A40": 84, "A30": 56, "A10G": 80, "A10": 72, "L40S": 142,
       "L40": 142, "L4": 58, "RTX 6000 Ada": 142, "RTX 4090": 128, "RTX 4080": 76, "RTX A6000": 84, "RTX A5000": 64,
       "RTX 3090": 82, "RTX 3080": 68, "V100": 80, "TITAN V": 80, "TITAN RTX": 72, "Quadro RTX 8000": 72,
       "Quadro RTX 6000": 72, "RTX 2080 Ti": 68, "T4": 40, "P100": 56, "P40": 30, "GTX 1080 Ti": 28}
MAMF = "stas00/ml-engineering compute/accelerator/README.md @744d01e1, Maximum Achievable Matmul FLOPS table"
TORCH_MM = "zzc0721/torch-performance-test-data database.md @9d828276 (torch.mm, best of 1024-10240 squares)"
# The share of the dense peak a large matmul reaches, measured: {"b16"|"fp32": (share, what was measured, source)}.
# 16-bit from the MAMF table where it has the GPU (bf16, mean of 100 runs after warm-up, the L2 cache cleared
# between them), else from torch.mm timings; fp32 (no TF32) from torch.mm. A GPU without a measurement gets
# gputopo.speed.GEMM_EFFICIENCY, and the output says so.
GEMM = {
    "A100": {"b16": (0.869, "bf16 271.2 of 312 TFLOPS", MAMF), "fp32": (0.984, "19.18 of 19.5 TFLOPS", TORCH_MM)},
    "H100": {"b16": (0.803, "bf16 794.5 of 989 TFLOPS", MAMF), "fp32": (0.778, "52.11 of 67 TFLOPS", TORCH_MM)},
    "H200": {"b16": (0.803, "bf16 as H100 SXM ('H200 is the same')", MAMF), "fp32": (0.766, "51.34 of 67", TORCH_MM)},
    "GH200": {"b16": (0.838, "bf16 828.6 of 989 TFLOPS", MAMF)},
    "B200": {"b16": (0.776, "bf16 1745.0 of 2250 TFLOPS", MAMF)},
    "V100": {"b16": (0.759, "fp16 94.84 of 125 TFLOPS", TORCH_MM), "fp32": (0.896, "14.06 of 15.7", TORCH_MM)},
    "L40S": {"b16": (0.744, "bf16 269.15 of 362 TFLOPS", TORCH_MM), "fp32": (0.512, "46.88 of 91.6", TORCH_MM)},
    "L4": {"b16": (0.586, "bf16 70.89 of 121 TFLOPS", TORCH_MM), "fp32": (0.508, "15.38 of 30.3", TORCH_MM)},
    "RTX 4090": {"b16": (1.013, "bf16 162.39-173.31 of 165.2 TFLOPS (median 167.4; boost above the datasheet's"
                                " clock)", TORCH_MM), "fp32": (0.666, "55.01 of 82.6", TORCH_MM)},
    "RTX 3090": {"b16": (1.075, "bf16 76.34 of 71 TFLOPS (fp32 accumulate; boost above the datasheet's clock)",
                         TORCH_MM), "fp32": (0.698, "24.84 of 35.6", TORCH_MM)},
    "RTX A6000": {"b16": (0.797, "bf16 123.34 of 154.8 TFLOPS", TORCH_MM), "fp32": (0.618, "23.92 of 38.7", TORCH_MM)},
}
GPU_BENCHES = "te42kyfo/gpu-benches @1c36d509"
# The share of the datasheet's memory bandwidth a streaming kernel reaches, measured: gpu-stream's "scale" (read
# one array, write one) and "triad" (read two, write one) on 1 GiB arrays, the best block size of each, averaged:
# {key: (share, what was measured, source)}. A GPU without a measurement gets gputopo.speed.MEMORY_EFFICIENCY.
STREAM = {
    "V100": (0.899, "scale 804, triad 814 of 900 GB/s (gpu-stream/v100.txt)", GPU_BENCHES),
    "A100": (0.856, "scale 1732, triad 1759 of 2039 GB/s (gpu-stream/a100_80.txt)", GPU_BENCHES),
    "H200": (0.698, "scale 3165, triad 3534 of 4800 GB/s (gpu-stream/h200.txt)", GPU_BENCHES),
    "A40": (0.949, "scale 658, triad 663 of 696 GB/s (gpu-stream/a40.txt)", GPU_BENCHES),
    "L40": (0.937, "scale 816, triad 803 of 864 GB/s (gpu-stream/l40.txt)", GPU_BENCHES),
}
STREAM_VARIANTS = {
    "A100 SXM4 40GB": (0.886, "scale 1381, triad 1375 of 1555 GB/s (gpu-stream/a100_40.txt)", GPU_BENCHES),
    "A100 PCIe 40GB": (0.886, "scale 1381, triad 1375 of 1555 GB/s (gpu-stream/a100_40.txt)", GPU_BENCHES),
    "H100 PCIe 80GB": (0.884, "scale 1704, triad 1832 of 2000 GB/s (gpu-stream/h100_pcie.txt)", GPU_BENCHES),
}
# A kernel's time beyond its bytes, measured: gpu-small-kernels queues 10000 dependent launches of a streaming
# kernel on 64 kB (the smallest size; "4096 64kB" rows): 26 GB/s on an H200, 25 on an A100 80GB, i.e. 2.5 and
# 2.6 us a kernel; 40 (L40: 1.6 us) and 32 (A40: 2.0 us). Another GPU gets gputopo.speed.KERNEL_S.
KERNEL_S = {"H200": (2.5e-6, "gpu-small-kernels/h200.txt: 26 GB/s on 64 kB"),
            "A100": (2.6e-6, "gpu-small-kernels/a100_80.txt: 25 GB/s on 64 kB"),
            "L40": (1.6e-6, "gpu-small-kernels/l40.txt: 40 GB/s on 64 kB"),
            "A40": (2.0e-6, "gpu-small-kernels/a40.txt: 32 GB/s on 64 kB")}
# Variants measured apart from their key (matched as VARIANTS is).
GEMM_VARIANTS = {
    "A100 PCIe 40GB": {"b16": (0.811, "bf16 252.9 of 312 TFLOPS (A100 PCIe)", MAMF),
                       "fp32": (0.901, "17.56 of 19.5 (A100-PCIE-40GB)", TORCH_MM)},
    "A100 PCIe 80GB": {"b16": (0.811, "bf16 252.9 of 312 TFLOPS (A100 PCIe)", MAMF)},
    "H100 PCIe 80GB": {"b16": (0.656, "bf16 495.93 of 756 TFLOPS", TORCH_MM), "fp32": (0.725, "36.95 of 51", TORCH_MM)},
}


# Variants with other memory than their key's measured one: the key's stream share is not theirs.
_OWN_MEMORY = {"A100 PCIe 80GB", "H800 PCIe 80GB", "A800 40GB PCIe", "A800 PCIe 80GB"}


def sheet(name: str | None, mem_bytes: int | None = None) -> dict | None:
    """The datasheet figures of a GPU named as nvidia-smi or the user writes it ("A100-PCIE-40GB", "H100"), with
    those of the variant its name or memory (bytes, when the name does not say) picks; None when unknown.
    `variant` names what was taken."""
    from .gpus import lookup
    g = lookup(name) if name else None
    if g is None or g.key not in PEAKS:
        return None
    form = re.sub(r"[^A-Z0-9]", "", name.upper())
    mem = g.memory_bytes or mem_bytes
    gb = mem / 2 ** 30 if mem else None
    for v in VARIANTS.get(g.key, ()):
        if ("form" in v and v["form"] not in form) or ("mem_gb" in v and (gb is None or
                                                                          abs(gb - v["mem_gb"]) > 0.1 * v["mem_gb"])):
            continue
        figures = {k: x for k, x in v.items() if k not in ("form", "mem_gb")}
        return {**PEAKS[g.key], "key": g.key, "arch": g.arch, "sms": SMS.get(g.key),
                "gemm": GEMM_VARIANTS.get(v["variant"], GEMM.get(g.key)),
                "stream": STREAM_VARIANTS.get(v["variant"], None if v["variant"] in _OWN_MEMORY else STREAM.get(g.key)),
                "kernel": KERNEL_S.get(g.key), **figures}
    return {**PEAKS[g.key], "key": g.key, "arch": g.arch, "variant": g.key, "sms": SMS.get(g.key),
            "gemm": GEMM.get(g.key), "stream": STREAM.get(g.key), "kernel": KERNEL_S.get(g.key)}


def pcie_gbps(figures: dict | None) -> tuple[float | None, str]:
    """Per-direction GB/s of a GPU's PCIe host link from its datasheet's generation and lanes, and its name."""
    from .topology import PCIE_LANE_GBPS
    gen, lanes = (figures or {}).get("pcie") or (None, None)
    if not gen:
        return None, "PCIe generation unknown"
    return PCIE_LANE_GBPS[gen] * lanes, f"PCIe gen{gen} x{lanes}"


# The host of a described machine whose cores are not given (--cpu-cores): the cores an NVIDIA DGX gives each of its
# eight SXM GPUs (its datasheet's CPUs), for the SXM boards DGX systems carry; for any other card a workstation's, from
# a 16-core desktop CPU (Ryzen 9 7950X) up to a 64-core Threadripper PRO 7985WX. An assumption, said as one, with
# the step it gives at each end (gputopo.report).
DGX_HOSTS = {   # key: (cores of the 8-GPU system, what they are, source)
    "V100": (40, "DGX-1 (V100): 2 x Xeon E5-2698 v4, 20 cores each",
             "https://images.nvidia.com/content/pdf/dgx1-v100-system-architecture-whitepaper.pdf"),
    "A100": (128, "DGX A100: 2 x AMD EPYC 7742, 64 cores each",
             "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/nvidia-dgx-a100-datasheet.pdf"),
    "H100": (112, "DGX H100: 2 x Xeon Platinum 8480C, 56 cores each",
             "https://resources.nvidia.com/en-us-dgx-systems/ai-enterprise-dgx"),
    "H200": (112, "DGX H200: 2 x Xeon Platinum 8480C, 56 cores each",
             "https://resources.nvidia.com/en-us-dgx-systems/dgx-h200-datasheet"),
    "B200": (112, "DGX B200: 2 x Xeon Platinum 8570, 56 cores each",
             "https://resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet"),
}
WORKSTATION_CORES = (16, 64)


def host_cores(name: str | None, mem_bytes: int | None, gpus_per_node: int,
               link_type: str | None = None) -> tuple[int, tuple[int, int], str]:
    """(cores assumed per node, the range the assumption spans, what it is): a DGX's share per GPU for its SXM
    boards joined by NVLink (from half of it: OEM HGX servers carry 2 x 32-48 cores; no more than a whole DGX's for
    more GPUs), else a workstation's 16 (up to 64): PCIe cards, and SXM parts the link says are on PCIe."""
    fig = sheet(name, mem_bytes)
    sxm = fig is not None and (fig["variant"] == fig["key"] or "SXM" in fig["variant"].upper())
    nvlink = link_type is None or str(link_type).upper().startswith("NV")
    if sxm and nvlink and fig["key"] in DGX_HOSTS:   # the board a DGX carries, as it carries it
        cores, what, source = DGX_HOSTS[fig["key"]]
        share = max(WORKSTATION_CORES[0], cores * min(gpus_per_node, 8) // 8)   # one GPU's share: a workstation's
        return share, (max(1, share // 2), share), \
            f"{what}, {share} for {min(gpus_per_node, 8)} of its 8 GPUs ({source})"
    low, high = WORKSTATION_CORES
    return low, (low, high), f"a workstation's {low} (a 16-core desktop CPU; up to a {high}-core Threadripper PRO)"
