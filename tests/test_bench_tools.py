"""bench/stalls.py on a small ncu source CSV of known counts."""

import csv
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def write_csv(path, rows):
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
              "stall_selected", "stall_wait", "stall_long_sb"]
    with open(path, "w", newline="") as f:
        f.write("==PROF== preamble line that is not CSV\n")
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "k"])
        w.writerow(header)
        for r in rows:
            w.writerow(r)


def test_stalls_shares_and_hot_instructions(tmp_path):
    path = tmp_path / "source.csv"
    write_csv(path, [
        ["0x1000", "LDS R1, [R2]", "10", "4", "2", "0", "8"],
        ["0x1010", "FFMA R3, R1, R4, R3", "6", "4", "3", "3", "0"],
        ["0x1020", "EXIT", "4", "4", "4", "0", "0"],
    ])
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "stalls.py"), str(path), "--top", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [l.split() for l in r.stdout.splitlines()]
    assert lines[0][:1] == ["3"] and "20" in lines[0]
    shares = {l[0]: (l[1], l[3]) for l in lines if len(l) == 4 and l[2] == "samples"}
    assert shares == {"selected": ("9", "45.0%"), "wait": ("3", "15.0%"), "long_sb": ("8", "40.0%")}
    hot = [l for l in lines if l and l[0].isdigit() and len(l) > 2 and l[1].startswith("+")]
    assert ["3", "+00010", "FFMA"] == hot[0][:3]  # the instruction holding the wait samples
    assert ["8", "+00000", "LDS"] == hot[1][:3]  # and the long-scoreboard ones


def test_stalls_rejects_other_csv(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "stalls.py"), str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "not an ncu source CSV" in r.stderr


def run_ab(base, new):
    """bench/ab.py's output for the base and new builds' logs."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "ab.py"), *base, "--", *new],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_ab_medians_and_ratio(tmp_path):
    """bench/ab.py on Go benchmark lines of two builds: medians over runs, base time over new."""
    line = "BenchmarkPrefillShapes/130m/B1_T2048-16 \t 1\t2000000000 ns/op\t {ms} ms\t 1 tok/s\n"
    paths = []
    for name, ms in [("base_1", 2.0), ("base_2", 4.0), ("base_3", 3.0), ("new_1", 2.5), ("new_2", 1.5), ("new_3", 9.0)]:
        path = tmp_path / f"{name}.log"
        path.write_text("goos: linux\n" + line.format(ms=ms) + "PASS\n")
        paths.append(str(path))
    out = run_ab(paths[:3], paths[3:])
    row = [c.strip() for c in out.splitlines()[2].split("|")[1:-1]]
    assert row == ["130m/B1_T2048", "3.000", "2.500", "682,667", "819,200", "1.200x", "3/3"]


def test_ab_window(tmp_path):
    """bench/ab.py's window table: T=8192 tokens/s over T=2048's, per run (one log) and from the medians."""
    line = "BenchmarkPrefillShapes/130m/B1_T{T}-16 \t 1\t2000000000 ns/op\t {ms} ms\t 1 tok/s\n"
    paths = []
    # base: 4·2/7 = +14.3%, 4·2/8 = 0%, 4·3/8 = +50%; medians 2 and 8: 0%.
    # new: the T=8192 line missing in one log, whose run then gives no window;
    # 4·2/6 = +33.3%, 4·1/3.2 = +25%; the medians of the runs with both: 1.5 and 4.6, +30.4%.
    for name, short, long in [("base_1", 2.0, 7.0), ("base_2", 2.0, 8.0), ("base_3", 3.0, 8.0),
                              ("new_1", 2.0, 6.0), ("new_2", 2.0, None), ("new_3", 1.0, 3.2)]:
        path = tmp_path / f"{name}.log"
        text = line.format(T=2048, ms=short)
        if long is not None:
            text += line.format(T=8192, ms=long)
        path.write_text("goos: linux\n" + text + "PASS\n")
        paths.append(str(path))
    out = run_ab(paths[:3], paths[3:])
    rows = [l for l in out.splitlines() if l.startswith("| 130m |")]
    assert len(rows) == 1, out
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert cells == ["130m", "+14.3%, +0.0%, +50.0%", "+0.0%", "+33.3%, +25.0%", "+30.4%"]


def test_ab_tuned_picks(tmp_path):
    """bench/ab.py's third table: each build's cuBLASLt choices per shape, with the runs that made them."""
    bench = "BenchmarkPrefillShapes/370m/B1_T2048-16 \t 1\t2000000000 ns/op\t 5.5 ms\t 1 tok/s\n"
    tuned = "--- BENCH: BenchmarkPrefillShapes/370m/B1_T2048-16\n    bench_test.go:612: tuned 370m/B1_T2048: {}\n"
    paths = []
    for name, pick in [("base_1", "in_proj 2, x_proj 0, out_proj 1"), ("base_2", "in_proj 2, x_proj 0, out_proj 1"),
                       ("new_1", "in_proj 2, x_proj 0, out_proj 1"), ("new_2", "in_proj 3, x_proj 0, out_proj 1")]:
        path = tmp_path / f"{name}.log"
        path.write_text(bench + tuned.format(pick) + "PASS\n")
        paths.append(str(path))
    out = run_ab(paths[:2], paths[2:])
    rows = [l for l in out.splitlines() if l.startswith("| 370m/B1_T2048 | in_proj")]
    assert len(rows) == 1, out
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert cells == ["370m/B1_T2048", "in_proj 2, x_proj 0, out_proj 1 (run 1, 2)",
                     "in_proj 2, x_proj 0, out_proj 1 (run 1); in_proj 3, x_proj 0, out_proj 1 (run 2)"]


def test_graph_trace_edges_splits_replays_at_their_first_layer():
    sys.path.insert(0, str(ROOT / "bench"))
    import graph_trace

    # Three replays of two layers each (RMSNorm, GEMM, scan, GEMM; the first
    # layer's RMSNorm with the embedding lookup or without), each
    # followed by the final norm, the output's copy and the next poison:
    # times in us, every activity 1 us long, 1 us apart, so a replay is 11
    # activities and 22 us.
    def trace(first_norm):
        names = []
        for _ in range(3):
            for layer in range(2):
                names += [first_norm if layer == 0 else "rmsnorm_bf16", "nvjet_gemm", "scan_onepass", "nvjet_gemm"]
            names += ["rmsnorm_f32", "Memcpy DtoD", "Memset (Device)"]
        return names

    for first_norm in ("rmsnorm_bf16", "rmsnorm_embed_bf16"):
        check_edges(graph_trace, trace(first_norm))


def check_edges(graph_trace, names):
    ks = []
    for i, n in enumerate(names):
        t0 = 2.0 * i
        ks.append((n, t0, t0 + 1, 1.0 if i else 0.0, 2.0 * (i + 1) if i + 1 < len(names) else None))
    o = graph_trace.edges(ks, "rmsnorm_bf16", 2)
    assert [r[0] for r in o["after"]] == ["rmsnorm", "Memcpy Dto", "Memset (De"]
    assert o["launch_gap_us"] == 1.0
    # From the second replay's last GEMM's end (t = 2*18 + 1) to the third
    # replay's first RMSNorm (t = 2*22): 7 us.
    assert o["outside_us"] == 7.0
    assert o["span_us"] == 21.0


def test_graph_trace_compare_instances_lines_up_each_place(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import graph_trace

    def run(ms, scan_us):
        rows = [{"role": "rmsnorm", "to_next_start_us": 2.0}, {"role": "scan", "to_next_start_us": scan_us},
                {"role": "gemm", "to_next_start_us": None}]
        return {"2048": {"replay_ms_untraced": ms, "period_us": 2.0 + scan_us, "rows": rows}}

    graph_trace.compare_instances([run(2.175, 50.0), run(2.221, 51.5)])
    out = capsys.readouterr().out
    assert "replay ms: 2.175, 2.221" in out
    assert "period us: 52.00, 53.50" in out
    scan = [l for l in out.splitlines() if " scan " in l]
    assert len(scan) == 1 and scan[0].split()[-2:] == ["50.00", "51.50"], out
    gemm = [l for l in out.splitlines() if " gemm " in l]
    assert len(gemm) == 1 and gemm[0].split()[-2:] == ["-", "-"], out


def test_hf_precision_stats_and_cases():
    sys.path.insert(0, str(ROOT / "bench"))
    import hf_precision
    import numpy as np

    ref = np.array([[[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]])
    assert hf_precision.logit_stats(ref, ref) == (0.0, 2)
    # One position's distribution changed: KL = sum p (log p - log q) there, half of it the mean.
    got = ref.copy()
    got[0, 1] = [0.0, 3.0, 0.0]
    p = np.exp(ref[0, 1]) / np.exp(ref[0, 1]).sum()
    q = np.exp(got[0, 1]) / np.exp(got[0, 1]).sum()
    kl, hits = hf_precision.logit_stats(ref, got)
    assert abs(kl - (p * np.log(p / q)).sum() / 2) < 1e-12 and hits == 1
    cases = hf_precision.causal_lm_cases()
    assert {"base", "batch3", "falcon", "embeds"} <= set(cases)
    assert not {"features", "mambamodel", "original"} & set(cases)


def test_graph_trace_leaves_memsets_beside_a_kernel_off_the_chain():
    sys.path.insert(0, str(ROOT / "bench"))
    import graph_trace

    # Two layers: the memset (1 us) beside the scan starts before it in one
    # and after it in the other, and neither stays; a memset that ends
    # before the next kernel starts keeps its place.
    acts = [("rmsnorm_bf16", 0.0, 2.0), ("memset_rows", 2.5, 3.0), ("nvjet_gemm", 3.5, 9.0),
            ("memset_rows", 9.5, 10.5), ("scan_onepass", 9.8, 60.0), ("nvjet_gemm", 60.5, 70.0),
            ("rmsnorm_bf16", 70.5, 72.0), ("memset_rows", 72.5, 73.0), ("nvjet_gemm", 73.5, 79.0),
            ("scan_onepass", 79.5, 130.0), ("memset_rows", 79.7, 80.7), ("nvjet_gemm", 130.5, 140.0)]
    layer = ["rmsnorm_bf16", "memset_rows", "nvjet_gemm", "scan_onepass", "nvjet_gemm"]
    assert [a[0] for a in graph_trace.chain(acts)] == layer + layer
    rows = graph_trace.with_gaps(graph_trace.chain(acts))
    assert rows[3][0] == "scan_onepass" and rows[3][4] == 60.5  # the next start: out_proj's


def test_mamba_ssm_table_rows_name_their_batch(tmp_path):
    """bench/mamba_ssm/table.py: each decode row gives its B (B=1 where an older result has none), each
    prefill row its own call's GEMM rate where it was merged from another call."""
    row = {"shape": "130m", "d": 768, "layers": 24, "B": 8, "T": 2048, "mambago_ms": 12.0,
           "mambago_tok_s": 1365333.0, "roofline_fraction": 0.31, "mamba_ssm_ms": 30.0, "speedup": 2.5,
           "max_rel_err_vs_mamba_ssm": 7e-3}
    result = {"commit": "abc1234", "gpu": "H200", "torch": "2.11", "date": "2026-12-04", "timing": "events",
              "bf16_gemm_flops": 770e12, "prefill": [row, dict(row, bf16_gemm_flops=1e12)],
              "decode": [{"shape": "130m", "B": 8, "mambago_step_ms": 0.463, "mamba_ssm_step_ms": 0.634,
                          "speedup": 1.37},
                         {"shape": "370m", "mambago_step_ms": 0.713, "mamba_ssm_step_ms": 1.508, "speedup": 2.11}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "mamba_ssm" / "table.py"), str(path)],
                       capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    assert "| 130m | 8 | 463 | 634 | 1.37× |" in lines
    assert "| 370m | 1 | 713 | 1508 | 2.11× |" in lines
    prefill = [line for line in lines if line.startswith("| 130m | 8 | 2048 |")]
    # The same tokens/s against a ceiling of 770 TFLOP/s and of 1 TFLOP/s: the second row's fraction is far higher.
    fractions = [int(line.split("|")[7].strip().rstrip("%")) for line in prefill]
    assert len(fractions) == 2 and fractions[1] > 10 * fractions[0], prefill


def test_step_trace_places_a_decode_layers_kernels(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import step_trace
    from graph_trace import layers, summarize, with_gaps

    # Two replays of a three-layer step on the one-sequence entries: the
    # embedding, then in_proj, x_proj, the scan step and out_proj a layer,
    # then the LM head; each kernel 2 us long, starting 1 us before the
    # previous one ends (PDL), except the scan, which starts 0.5 us after.
    names = []
    for _ in range(2):
        names.append("embed_bf16")
        for _ in range(3):
            names += ["step_in_r4_b1_bf16", "gemv_b1_bf16", "step_scan_f32", "gemv_sb1_bf16"]
        names.append("gemv_sb1_bf16")
    acts, t = [], 0.0
    for n in names:
        t += 1.5 if n == "step_scan_f32" else 1.0
        acts.append((n, t, t + 2.0))
    s = summarize(layers(with_gaps(acts), step_trace.LAYER_START))
    # Layers end at the next in_proj: the first replay's last layer runs
    # into the head and the next embedding (6 kernels, left out), and the
    # second replay's has no next in_proj; 4 layers of 4 are left.
    assert s["kernels_a_layer"] == 4 and s["layers"] == 4
    assert [step_trace.step_role(r["names"][0]) for r in s["rows"]] == ["in_proj", "gemv_b1_bf16", "scan",
                                                                        "gemv_sb1_bf16"]
    assert [r["gap_us"] for r in s["rows"]] == [-1.0, -1.0, -0.5, -1.0]
    assert [r["to_next_start_us"] for r in s["rows"]] == [1.0, 1.5, 1.0, 1.0]
    assert s["period_us"] == 4.5
    step_trace.table(s, "2.8b B=1")
    out = capsys.readouterr().out
    assert "period 4.50 us a layer" in out and " scan " in out
