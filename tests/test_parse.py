"""The parsers against real nvidia-smi outputs, damaged pastes and random text."""
import json
import re

import pytest
from conftest import FIXTURES, fixture_text
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo import parse
from gputopo.errors import BadInput

EXPECTED = sorted(p.name[: -len(".expected.json")] for p in (FIXTURES / "topo").glob("*.expected.json"))


def as_expected(topo) -> dict:
    """The parse in the sidecar's shape (see fixtures/topo/SOURCES.md)."""
    gpu_pairs = [l for l in topo.links if l.a.startswith("GPU") and l.b.startswith("GPU")]
    nic_pairs = [l for l in topo.links if not l.b.startswith("GPU")]
    out = {"gpus": len(topo.gpus), "nics": len(topo.nics),
           "pairs": {f"{l.a}-{l.b}": l.type for l in gpu_pairs},
           "cpu_affinity": {g.name: g.cpu_affinity for g in topo.gpus},
           "numa_affinity": {g.name: g.numa_affinity for g in topo.gpus}}
    if nic_pairs:
        out["gpu_nic"] = {f"{l.a}-{l.b}": l.type for l in nic_pairs}
    return out


@pytest.mark.parametrize("name", EXPECTED)
def test_fixture_parses_to_expected(name):
    expected = json.loads((FIXTURES / "topo" / f"{name}.expected.json").read_text())
    expected.pop("_note", None)
    assert as_expected(parse.texts([fixture_text(f"{name}.txt")])) == expected


def test_there_are_fixtures():
    assert len(EXPECTED) >= 15


def test_nic_legend_and_old_names():
    topo = parse.topo_matrix(fixture_text("a800x8_nv8_4nic_crlf.txt"))
    assert [(n.name, n.device) for n in topo.nics][:2] == [("NIC0", "mlx5_0"), ("NIC1", "mlx5_1")]
    old = parse.topo_matrix(fixture_text("dgx1_v100_hybrid_cube_mesh_mlx5_old_format.txt"))
    assert old.nics[3].name == old.nics[3].device == "mlx5_3"
    bare = parse.topo_matrix(fixture_text("rtx4090x8_all_sys_2nic.txt"))
    assert [n.device for n in bare.nics] == [None, None]


def test_gpu_numa_id_column_kept():
    topo = parse.topo_matrix(fixture_text("h200x8_nv18_10nic.txt"))
    assert topo.gpus[0].gpu_numa_id is None and topo.gpus[7].numa_affinity == "1"
    assert len(topo.nics) == 10


def cut_right(text: str, width: int) -> str:
    return "\n".join(line[:width] for line in text.splitlines())


def test_columns_cut_by_terminal_give_one_clear_line():
    text = cut_right(fixture_text("dgx1_v100_hybrid_cube_mesh_mlx5_old_format.txt").expandtabs(), 80)
    with pytest.raises(BadInput, match="row for mlx5_0 but the header has no column.*cut at the right.*topo.txt"):
        parse.texts([text])


def test_rows_cut_under_a_whole_header():
    lines = fixture_text("dgx1_v100_hybrid_cube_mesh_mlx5_old_format.txt").splitlines()
    text = "\n".join(lines[:2] + [l[:98] for l in lines[2:]])
    with pytest.raises(BadInput, match=r"row GPU0 has 11 of 12 cells \(missing mlx5_3\).*cut at the right.*topo.txt"):
        parse.texts([text])
    text = "\n".join(lines[:2] + [l[:94] for l in lines[2:]])
    with pytest.raises(BadInput, match=r"row GPU0, column mlx5_2: 'SY' is a link type cut mid-word"
                                       r".*cut at the right.*topo.txt"):
        parse.texts([text])


def test_all_tabs_lost_is_refused_not_guessed():
    text = ("GPU0GPU1GPU2CPU AffinityNUMA AffinityGPU NUMA ID\nGPU0XNODENODE0-310N/A\n"
            "GPU1NODEXNODE0-310N/A\nGPU2NODENODEX0-310N/A\n")
    with pytest.raises(BadInput, match="row GPU0 lacks the 'NUMA Affinity', 'GPU NUMA ID'.*ran together"):
        parse.texts([text])


def test_affinity_column_cut_is_named():
    text = fixture_text("a800x8_nv8_4nic_crlf.txt").replace("\r", "")
    text = "\n".join(l[:115] if l.startswith("GPU") else l for l in text.splitlines())
    with pytest.raises(BadInput, match="'NUMA Affinity'.*cut at the right.*topo.txt"):
        parse.texts([text])


def test_rows_cut_at_bottom():
    lines = fixture_text("h100x8_nv18_no_nic_spaces.txt").splitlines()
    with pytest.raises(BadInput, match="GPU6, GPU7 but no row"):
        parse.texts(["\n".join(lines[:8])])


def test_lost_tab_cells_run_together():
    text = fixture_text("rtx4090x8_all_sys_2nic.txt").replace("\tSYS\tPHB\tPHB\t56", "\tSYSPHB\tPHB\t56")
    assert "SYSPHB" in text
    topo = parse.topo_matrix(text)
    assert topo.link("GPU6", "GPU7").type == "SYS" and topo.link("GPU6", "NIC0").type == "PHB"


def test_misaligned_row_is_refused():
    text = fixture_text("gpu3_nv4_pair_node_2nic_numa1.txt").replace("GPU1    NV4      X ", "GPU1    NV4     NV4  X ")
    with pytest.raises(BadInput, match="GPU1.*misaligned"):
        parse.texts([text])


def test_ansi_and_indent_and_trailing_commands():
    topo = parse.topo_matrix(fixture_text("dgx_a100_nv12_mlx5_old_names_trailing_cmds.txt"))
    assert len(topo.gpus) == 8 and len(topo.nics) == 12 and topo.gpus[4].cpu_affinity == "112-127,240-255"


def test_nvlink_status_and_p2p_combine_with_matrix():
    topo = parse.texts([fixture_text("h100x8_nv18_no_nic_spaces.txt"), fixture_text("p2p_matrix_h100x8_ok.txt"),
                        fixture_text("nvlink_status_h800_elided.txt")])
    assert topo.gpu("GPU0").model == "NVIDIA H800" and topo.gpu("GPU3").model is None
    assert len(topo.gpu("GPU7").nvlinks) == 8 and all(n.active and n.speed_gbps == 26.562
                                                      for n in topo.gpu("GPU7").nvlinks)
    assert topo.link("GPU0", "GPU5").p2p == {"r": "OK"}


def test_p2p_only():
    topo = parse.texts([fixture_text("p2p_matrix_l4x2_cns.txt")])
    assert topo.link("GPU0", "GPU1").p2p == {"r": "CNS"} and topo.link("GPU0", "GPU1").type is None


def test_nvlink_inactive_and_blank_lines():
    gpus = parse.gpu_list(fixture_text("nvlink_status_v100sxm2_gpu0_blank_lines.txt"))
    assert gpus[0].model == "Tesla V100-SXM2-32GB" and len(gpus[0].nvlinks) == 6
    down = parse.gpu_list("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)\n Link 0: 25 GB/s\n Link 1: <inactive>\n")
    assert [n.active for n in down[0].nvlinks] == [True, False]


def test_nvidia_smi_L():
    gpus = parse.gpu_list("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-abc)\n"
                          "GPU 1: NVIDIA GeForce RTX 4090 (UUID: GPU-def)\n")
    assert [g.model for g in gpus] == ["NVIDIA GeForce RTX 4090"] * 2 and gpus[1].uuid == "GPU-def" \
        and gpus[0].nvlinks is None


@pytest.mark.parametrize("text,msg", [
    ("", "empty"), ("hello world\n", "not nvidia-smi output"), ("\x00\x01binary", "binary"),
    ("GPU0 GPU0 CPU Affinity\nGPU0 X 0-3\n", "repeats"),
])
def test_bad_texts(text, msg):
    with pytest.raises(BadInput, match=msg):
        parse.texts([text])


def test_texts_from_different_machines():
    with pytest.raises(BadInput, match="different machines"):
        parse.texts([fixture_text("consumer_x2_pcie_phb_numa_na.txt"), fixture_text("nvlink_status_h800_elided.txt")])


ALL_TEXTS = [p.read_bytes().decode() for p in sorted((FIXTURES / "topo").glob("*.txt"))]


def _safe_parse(text):
    try:
        parse.texts([text])
    except BadInput as e:
        assert "\n" not in str(e) and str(e)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("GPUNICX0123456789 \t\n-,:/VSYHBODEAfnityL\x1b[m")), max_size=400))
def test_random_text_never_tracebacks(text):
    _safe_parse(text)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(ALL_TEXTS), st.data())
def test_mutated_pastes_never_traceback(text, data):
    ops = data.draw(st.lists(st.tuples(st.sampled_from(["cut", "drop", "dup", "swap", "trunc_line", "insert"]),
                                       st.integers(0, 10_000), st.integers(0, 200), st.text(max_size=5)), max_size=4))
    lines = text.splitlines()
    for op, pos, n, s in ops:
        if not lines:
            break
        i = pos % len(lines)
        if op == "cut":
            text = "\n".join(lines)
            p = pos % max(1, len(text))
            lines = (text[:p] + text[p + n:]).splitlines()
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = n % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "trunc_line":
            lines[i] = lines[i][:n]
        else:
            lines[i] = lines[i][: n % (len(lines[i]) + 1)] + s + lines[i][n % (len(lines[i]) + 1):]
    _safe_parse("\n".join(lines))


# --- one GPU, topo -m vs topo -p2p, damaged and re-encoded pastes (issue 10 items 1 and 3, issue 14 item 7) ---

ONE_GPU = ["h100x1_lmdeploy_check_env_preface", "rtxpro6000x1_sglang_check_env_trailing", "h100x1_gke_pod_cmd_comment",
           "a100x1_5nic_sglang_check_env", "h100x1_driver580_ansi_header"]


@pytest.mark.parametrize("name", ONE_GPU)
def test_real_one_gpu_pastes_are_topo_m(name):
    text = fixture_text(f"{name}.txt")
    assert parse.kind(text) == "topo"
    topo = parse.texts([text])
    assert [g.name for g in topo.gpus] == ["GPU0"] and topo.gpu_links() == []
    assert topo.gpus[0].numa_affinity is not None and topo.gpus[0].gpu_numa_id is None


def test_one_gpu_without_legend_or_escapes_still_topo_m():
    text = fixture_text("h100x1_driver580_ansi_header.txt")
    bare = text.split("\n\nLegend:")[0].replace("\x1b[4m", "").replace("\x1b[0m", "")
    assert parse.kind(bare) == "topo" and parse.topo_matrix(bare).gpus[0].cpu_affinity == "0-15"
    # The same single row with a multi-range affinity and NUMA N/A, as consumer boards print it.
    na = bare.replace("0-15\t0\t", "0-51,104-155\tN/A\t")
    assert (parse.topo_matrix(na).gpus[0].cpu_affinity, parse.topo_matrix(na).gpus[0].numa_affinity) == \
        ("0-51,104-155", None)


P2P_ONE_GPU = " \tGPU0\n GPU0\tX\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"


def test_p2p_told_apart_by_cells_and_legend_not_gpu_count():
    assert parse.kind(P2P_ONE_GPU) == "p2p"
    assert parse.kind("$ nvidia-smi topo -p2p w\n\tGPU0\nGPU0\tX\n") == "p2p"
    assert parse.kind(fixture_text("p2p_matrix_l4x2_cns.txt")) == "p2p"
    with pytest.raises(BadInput, match="not `topo -m`"):
        parse.topo_matrix(P2P_ONE_GPU)
    with pytest.raises(BadInput, match="not a `nvidia-smi topo -p2p`"):
        parse.p2p_matrix(fixture_text("h100x1_lmdeploy_check_env_preface.txt"))
    mixed = fixture_text("h100x1_lmdeploy_check_env_preface.txt").replace("  X    = Self",
                                                                          "  X    = Self\n  OK   = Status Ok")
    with pytest.raises(BadInput, match="mixes `topo -p2p`.*a P2P legend.*`topo -m`.*affinity columns"):
        parse.texts([mixed])


def _cut(text: str, width: int) -> str:
    """What a terminal `width` columns wide keeps of each line (tabs expanded as the terminal does)."""
    return "\n".join(l.expandtabs(8)[:width].rstrip() for l in text.replace("\r", "").splitlines())


def test_terminal_cut_through_the_header_titles():
    text = _cut(fixture_text("a100x2_nv12_5nic_sglang_check_env.txt"), 72)  # header ends "CPU Aff"
    with pytest.raises(BadInput, match=r"header ends in 'CPU Affi'.*cut at the right.*nvidia-smi topo -m > topo.txt"):
        parse.texts([text])


def test_terminal_cut_through_the_nic_labels():
    # 40 columns keep GPU0 GPU1 NIC0 NIC1 in the header; the NIC2..NIC4 rows have no column any more.
    text = _cut(fixture_text("a100x2_nv12_5nic_sglang_check_env.txt"), 40)
    with pytest.raises(BadInput, match=r"row for NIC2 but the header has no column.*cut at the right"):
        parse.texts([text])


def test_nic_rows_with_cells_the_header_lacks():
    lines = fixture_text("a100x2_nv12_5nic_sglang_check_env.txt").splitlines()
    lines[1] = lines[1].replace("\tNIC4\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID", "")
    body = [l for l in lines if l.startswith("NIC")]
    with pytest.raises(BadInput, match=r"row GPU0 has 3 values .*CPU/NUMA affinity|row GPU0 has more cells"):
        parse.texts(["\n".join(lines)])
    # Only NIC rows under a header that lost its last NIC column: each NIC row has a cell too many.
    header = "\tGPU0\tGPU1\tNIC0\tNIC1\tNIC2\tNIC3"
    gpu = "GPU0\t X \tNV12\tNODE\tNODE\tPXB\tSYS\nGPU1\tNV12\t X \tNODE\tNODE\tPXB\tSYS\n"
    with pytest.raises(BadInput, match=r"row NIC0 has more cells than the header has columns.*cut at the right"):
        parse.texts([header + "\n" + gpu + "\n".join(body[:4])])


def test_affinity_cell_starting_or_ending_mid_list():
    text = fixture_text("a100x2_nv12_5nic_sglang_check_env.txt")
    with pytest.raises(BadInput, match=r"row GPU0, CPU Affinity '-31,64-95' starts mid-list.*topo.txt"):
        parse.texts([text.replace("\t0-31,64-95\t0\t\tN/A", "\t-31,64-95\t0\t\tN/A", 1)])
    with pytest.raises(BadInput, match=r"'0-31,64-' ends mid-list"):
        parse.texts([text.replace("\t0-31,64-95\t0\t\tN/A", "\t0-31,64-\t0\t\tN/A", 1)])
    # A terminal cut inside the affinity list leaves the NUMA columns missing: named, not guessed.
    with pytest.raises(BadInput, match=r"header ends in 'CPU'.*cut at the right"):
        parse.texts([_cut(text, 67)])


def test_legend_cut_mid_word_refuses_even_a_complete_looking_matrix():
    text = _cut(fixture_text("h100x1_lmdeploy_check_env_preface.txt"), 78)
    with pytest.raises(BadInput, match=r"legend line 'SYS = Connection .*between NU' is cut short.*topo.txt"):
        parse.texts([text])


def test_tabs_lost_and_blank_lines_between_rows_parse():
    original = parse.texts([fixture_text("a100x2_nv12_5nic_sglang_check_env.txt")])
    lines = [" ".join(l.split()) for l in fixture_text("a100x2_nv12_5nic_sglang_check_env.txt").splitlines()]
    spaced = "\n\n   \n".join(lines[:9]) + "\n" + "\n".join(lines[9:])  # markdown: single spaces, blank lines
    assert as_expected(parse.texts([spaced])) == as_expected(original)


def test_no_affinity_columns_but_complete_rows_parse_with_a_note():
    text = fixture_text("a100x2_nv12_5nic_sglang_check_env.txt")
    stripped = re.sub(r"\t(CPU Affinity\tNUMA Affinity\tGPU NUMA ID|0-31,64-95\t0\t\tN/A)", "", text)
    assert "Affinity" not in stripped
    topo = parse.texts([stripped])
    assert topo.link("GPU0", "GPU1").type == "NV12" and len(topo.nics) == 5
    assert [g.cpu_affinity for g in topo.gpus] == [None, None]
    assert any("no CPU Affinity or NUMA Affinity column" in n for n in topo.notes)


def test_header_cut_while_rows_carry_affinity():
    lines = fixture_text("h100x8_nv18_no_nic_spaces.txt").splitlines()
    lines[1] = lines[1][:lines[1].index("CPU Affinity")].rstrip()
    with pytest.raises(BadInput, match=r"row GPU0 has 3 values after its cells but the header has no CPU/NUMA"):
        parse.texts(["\n".join(lines)])


def test_blank_affinity_cells_are_placed_by_column():
    topo = parse.texts([fixture_text("gpu2_nv12_8nic_blank_affinity_vllm.txt")])
    assert [(g.cpu_affinity, g.numa_affinity, g.gpu_numa_id) for g in topo.gpus] == [(None, None, None)] * 2
    assert any("no CPU affinity" in n for n in topo.notes)


@pytest.mark.parametrize("name,msg", [
    ("l4x1_vllm_collect_env_headerless", r"a matrix row for GPU0 but no header line above it.*topo.txt"),
    ("gpu3_tabs_all_lost_blog", r"row GPU0 lacks the 'NUMA Affinity', 'GPU NUMA ID'.*ran together"),
])
def test_real_damaged_pastes_refused_in_one_line(name, msg):
    with pytest.raises(BadInput, match=msg) as e:
        parse.texts([fixture_text(f"{name}.txt")])
    assert "\n" not in str(e.value)


def _wrap(text: str, width: int) -> str:
    """What a terminal `width` columns wide shows when it wraps long lines instead of cutting them."""
    out = []
    for line in text.replace("\r", "").splitlines():
        line = line.expandtabs(8)
        out += [line[i:i + width] for i in range(0, len(line), width)] or [""]
    return "\n".join(out)


@pytest.mark.parametrize("damage", [_cut, _wrap])
@pytest.mark.parametrize("name", EXPECTED)
def test_any_terminal_width_parses_exactly_or_refuses(name, damage):
    """Every real paste, cut or wrapped at any width: the same topology, or one clear refusal; never a half
    parse. An affinity column that vanished whole is allowed only when a note says so."""
    full = json.loads((FIXTURES / "topo" / f"{name}.expected.json").read_text())
    full.pop("_note", None)
    for width in range(8, 200, 4):
        try:
            topo = parse.texts([damage(fixture_text(f"{name}.txt"), width)])
        except BadInput as e:
            assert "\n" not in str(e) and str(e)
            continue
        expected, notes = dict(full), " ".join(topo.notes)
        for col, key in (("CPU Affinity", "cpu_affinity"), ("NUMA Affinity", "numa_affinity")):
            if f"no {col}" in notes or "no CPU Affinity or NUMA Affinity" in notes:  # said, not guessed
                expected[key] = {g: None for g in expected[key]}
        assert as_expected(topo) == expected, (name, damage.__name__, width)


def test_legend_stopping_at_a_word_boundary_is_not_a_cut():
    # Another driver's shorter wording (or a cut exactly between words) cannot be told from a cut: let through.
    text = fixture_text("h100x1_lmdeploy_check_env_preface.txt").replace(" (e.g., QPI/UPI)", "")
    assert parse.texts([text]).gpus[0].cpu_affinity == "0-25"


def test_wrapped_legend_and_a_second_matrix_in_one_report():
    """A rig report (club-3090#1125): indented matrix, legend lines wrapped at 80 columns, then `topo -p2p`."""
    topo = parse.texts([fixture_text("gpu2_node_wrapped_legend_p2p_rig_report.txt")])
    assert topo.link("GPU0", "GPU1").type == "NODE" and topo.link("GPU0", "GPU1").p2p == {"unknown": "NS"}
    assert [g.cpu_affinity for g in topo.gpus] == ["0-15", "0-15"]
    rw = parse.texts([fixture_text("rtx5090x2_phb_with_p2p_rw_rig_report.txt")])
    assert rw.link("GPU0", "GPU1").type == "PHB" and rw.link("GPU0", "GPU1").p2p == {"rw": "GNS"}


def test_paste_ending_inside_a_row_is_cut_at_the_bottom():
    text = fixture_text("a100x1_5nic_sglang_check_env.txt").split("NIC3\tPXB")[0] + "NIC3"
    with pytest.raises(BadInput,
                       match=r"ends inside row NIC3 \(0 of 6 cells\): it was cut off at the bottom.*topo.txt"):
        parse.texts([text])


def test_quoted_reply_parses():
    # A reply quoting an environment report (sglang#11052 quotes check_env with '>' before every line).
    text = fixture_text("a100x2_nv12_5nic_sglang_check_env.txt")
    quoted = "\n".join(">" + l for l in text.splitlines())
    assert as_expected(parse.texts([quoted])) == as_expected(parse.texts([text]))


def test_garbled_nvlink_speed_is_refused_not_read_as_inactive():
    with pytest.raises(BadInput, match=r"GPU 0, Link 0: '25..781 GB/s' is neither a speed"):
        parse.texts(["GPU 0: Tesla V100-SXM2-32GB (UUID: GPU-4b6e)\n\n   Link 0: 25..781 GB/s"])


def test_an_unknown_whole_column_title_is_not_called_a_cut():
    """A column no known driver prints (a newer one, an edited paste) is named as such, not as a cut line."""
    lines = fixture_text("a100x2_nv12_5nic_sglang_check_env.txt").replace("\r", "").splitlines()
    head = next(i for i, l in enumerate(lines) if "CPU Affinity" in l)
    lines[head] += "\tFoo Col"
    with pytest.raises(BadInput, match=r"header ends in 'Foo Col', not a column title nvidia-smi is known to print"
                                       r".*a newer driver's column"):
        parse.texts(["\n".join(lines)])
