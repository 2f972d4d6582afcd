#!/usr/bin/env python3
"""Helper of scripts/arm-mca.sh (run that, not this): the K-quant rows, cycles per super-block
(256 weights) per row, ours against llama.cpp's, as a Markdown table on stdout.

Why not arm_mca.py's reading: a K-quant kernel's work for one super-block is a nest of loops
(ours: the rows of a 4-row band and the 32-value groups, as the compiler kept them; llama.cpp:
its 64- or 128-value sub-block loop), so no single loop body is "one block". Instead the
instructions one super-block really executes are taken from an execution trace:

  * each kernel runs in a small harness under qemu-aarch64 with its trace on (`-d
    in_asm,exec,nochain`: every translated block as it executes), once over B1 and once over
    B2 super-blocks per row (same rows, same calls);
  * the trace of the kernel (its symbol's address range, plus what it calls) is mapped back to
    the binary's own disassembly (llvm-objdump) and fed to llvm-mca as straight-line code, one
    iteration (branches included, as instructions: a perfect predictor, as in arm_mca.py);
  * cycles per super-block per row = (cycles(B2) − cycles(B1)) / ((B2 − B1) · rows): the per-call
    and per-row costs (entry, the final reductions, the row loop's tail) cancel, for both sides.

Ours: scripts/arm-mca-kq/main.rs calls `Kernels::gemv` of the tier (4 rows = one band).
llama.cpp: scripts/arm-mca-kq/harness.c calls `ggml_vec_dot_<fmt>_q8_K` once per row (4 rows).
Sanity check printed with each cell: executed instructions and SDOTs per super-block per row
(an SDOT multiplies 16 weight-activation pairs, so 16 per row and super-block is the minimum
for 256 weights).

The second table (`--tables gemm`): the matrix-matrix kernels (prefill, batched decode), cycles
per super-block per row per TOKEN, the same difference over 8 rows (one group of `gemm.rs`) ×
2, × 4 and × 16 tokens: ours `Kernels::gemm` of `dotprod` (SDOT) and `i8mm` (SMMLA) — the traced function is
the kernel's `unchecked` (decode of the group's rows included, each token's preparation not:
that is once per token per product, not per row) — against our `dotprod` matrix-vector kernel
(one token) and llama.cpp's `ggml_vec_dot_<fmt>_q8_K` with nrc = 2 (2 rows × 2 tokens a call
by SMMLA, from quants.c built with i8mm; Q4_K and Q6_K have that path). SMMLA does 32
multiply-adds, so 8 per row, token and super-block is the minimum. The SMMLA columns only on
-mcpu=neoverse-v1 (the modelled CPU with the int8 matrix-multiply extension).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arm_mca  # noqa: E402  (its llvm-mca runner, CPU list and hardware figures)

FORMATS = {  # format: bytes per 256-weight super-block
    "Q2_K": 84,
    "Q3_K": 110,
    "Q4_K": 144,
    "Q5_K": 176,
    "Q6_K": 210,
}
ROWS = 4
B1, B2 = 4, 8
# The matrix-matrix table: one 8-row group of gemm.rs and 2 tokens (one speculative draft token
# verified, one i8mm token pair), 4 (one dotprod tile, two i8mm token pairs: a batch of four
# sequences decoding) or 16 (a short prompt; the group's decode, once per call, shared by four
# times as many tokens); llama.cpp's nrc = 2 calls take 2 tokens. The sanity column at 4.
GEMM_ROWS, GEMM_TOKENS, SANITY_TOKENS = 8, (2, 4, 16), 4
GEMM_CPUS = arm_mca.CPUS + ["neoverse-v1"]
I8MM_CPUS = ["neoverse-v1"]
# llama.cpp's ggml_vec_dot_<fmt>_q8_K with an nrc == 2 int8 matrix-multiply path (quants.c).
LLAMA_NRC2 = ("Q4_K", "Q6_K")


def die(msg):
    print(f"arm_mca_kq.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def run(args, env=None):
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        die(f"{' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return r.stdout


def symbols(binary):
    """{name: (address, size)} of the binary's functions."""
    out = {}
    for line in run(["nm", "-S", binary]).splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTwW":
            out[p[3]] = (int(p[0], 16), int(p[1], 16))
    return out


def disassembly(binary):
    """{address: (mnemonic, operands)} of the binary's whole text."""
    text = run([TOOLS["objdump"], "-d", "--no-show-raw-insn", binary])
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if m and not m.group(2).endswith(">:"):
            out[int(m.group(1), 16)] = (m.group(2), m.group(3).split("//")[0].strip())
    return out


def trace(cmd, qemu_env):
    """(guest PCs of the executed translated blocks in order, {block pc: [insn pcs]}, stdout)."""
    with tempfile.NamedTemporaryFile(suffix=".log", delete=False) as f:
        log = f.name
    try:
        r = subprocess.run(["qemu-aarch64", "-d", "in_asm,exec,nochain", "-D", log] + cmd,
                           capture_output=True, text=True, env=qemu_env)
        if r.returncode != 0:
            die(f"qemu-aarch64 {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        seq, tbs, cur = [], {}, None
        with open(log) as fh:
            for line in fh:
                if line.startswith("IN:"):
                    cur = []
                    continue
                if cur is not None:
                    m = re.match(r"^0x([0-9a-f]+):", line)
                    if m:
                        cur.append(int(m.group(1), 16))
                        continue
                    if cur:
                        tbs[cur[0]] = cur
                    cur = None
                m = re.match(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/", line)
                if m:
                    seq.append((int(m.group(1), 16), tbs.get(int(m.group(1), 16))))
        return seq, r.stdout
    finally:
        os.unlink(log)


def kernel_trace(seq, lo, hi, bias, dis):
    """The instructions executed in [lo, hi) (file addresses) and in what it calls, in order.
    Called code outside the binary (the C library's allocator, when a matrix-matrix kernel's
    per-thread buffers grow on their first call) is left out: not the kernel's work, and once
    per call, so it would cancel in the difference anyway."""
    out, in_call = [], False
    for pc, insns in seq:
        if insns is None:
            die(f"trace: block at {pc:#x} executed before it was listed")
        inside = lo <= pc - bias < hi
        if not inside and not in_call:
            continue
        if not inside and pc - bias not in dis:
            continue
        for a in insns:
            ins = dis.get(a - bias)
            if ins is None:
                die(f"trace: no instruction at {a - bias:#x} in the disassembly")
            out.append(ins)
        if inside:
            in_call = out[-1][0] in ("bl", "blr")
    return out


def mca_text(insns):
    lines = []
    for mn, ops in insns:
        ops = re.sub(r"\s*<[^>]*>", "", ops)
        # Branch targets, page addresses and literal-pool loads as a label: only the
        # instruction's kind matters to llvm-mca.
        if arm_mca.BRANCH.match(mn) or mn in ("b", "bl", "adr", "adrp") or (mn.startswith("ldr") and re.search(r",\s*0x[0-9a-f]+$", ops)):
            ops = re.sub(r"(?:#?)(0x[0-9a-f]+|[0-9a-f]+)$", ".Lend", ops)
        lines.append(f"\t{mn}\t{ops}")
    return "\n".join(lines) + "\n.Lend:\n"


def mca_total(insns, cpu):
    """(total cycles of one pass over the straight-line trace, its resource bound)."""
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write(mca_text(insns))
        path = f.name
    try:
        r = subprocess.run([TOOLS["mca"], "-mtriple=aarch64", f"-mcpu={cpu}", "-iterations=1", path],
                           capture_output=True, text=True)
    finally:
        os.unlink(path)
    if r.returncode != 0:
        die(f"llvm-mca -mcpu={cpu} failed:\n{r.stderr[-3000:]}")
    cyc = int(re.search(r"^Total Cycles:\s+(\d+)", r.stdout, re.M).group(1))
    rt = float(re.search(r"^Block RThroughput:\s+([\d.]+)", r.stdout, re.M).group(1))
    return cyc, rt


TOOLS = {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="the aarch64 Rust harness (scripts/arm-mca-kq/main.rs)")
    ap.add_argument("--llama", required=True, help="the aarch64 static C harness (scripts/arm-mca-kq/harness.c)")
    ap.add_argument("--llama-i8mm", help="the same C harness linked with quants.c built with i8mm (the gemm table)")
    ap.add_argument("--sysroot", default="/usr/aarch64-linux-gnu")
    ap.add_argument("--llvm-suffix", default="")
    ap.add_argument("--tables", default="gemv,gemm", help="which tables: gemv, gemm or both (comma-separated)")
    ap.add_argument("--formats", default=",".join(FORMATS), help="which formats (comma-separated; default all)")
    a = ap.parse_args()
    asked = a.formats.split(",")
    if not set(asked) <= set(FORMATS):
        die(f"--formats {a.formats}: not among {', '.join(FORMATS)}")
    for fmt in set(FORMATS) - set(asked):
        del FORMATS[fmt]
    tables = a.tables.split(",")
    if "gemm" in tables and not a.llama_i8mm:
        die("the gemm table needs --llama-i8mm")
    for t, n in (("mca", "llvm-mca"), ("objdump", "llvm-objdump")):
        TOOLS[t] = (__import__("shutil").which(n + a.llvm_suffix)) or die(f"missing tool {n}{a.llvm_suffix}")
    env = dict(os.environ, QEMU_CPU="max")

    bins = {}
    paths = {"ours": a.ours, "llama": a.llama, "llama_i8mm": a.llama_i8mm}
    for who, path in paths.items():
        if path:
            bins[who] = (symbols(path), disassembly(path))

    def measure(who, fmt, tier, tokens=None, cpus=arm_mca.CPUS):
        """`tokens`: the matrix-matrix kernel (ours) or nrc = 2 (llama.cpp) over that many."""
        syms, dis = bins[who]
        rows, n_tok = ROWS, 1
        if who == "ours" and tokens:
            rows, n_tok = GEMM_ROWS, tokens
            mod, var = f"k_{fmt.lower()}", tier.upper()
            pat = re.compile(rf"4gemm{len(mod)}{mod}{len(var)}{var}9unchecked17h[0-9a-f]{{16}}E$")
            names = [s for s in syms if pat.search(s)]
            cmd = lambda b: ["-L", a.sysroot, a.ours, fmt, tier, str(b), str(rows), str(tokens)]
            label = f"aarch64_neon::gemm::{mod}::{var}"
        elif who == "ours":
            fn = f"gemv_{fmt.lower()}" + ("" if tier == "neon" else "_dotprod")
            pat = re.compile(rf"12aarch64_neon7kquants{len(fn)}{fn}17h[0-9a-f]{{16}}E$")
            names = [s for s in syms if pat.search(s)]
            cmd = lambda b: ["-L", a.sysroot, a.ours, fmt, tier, str(b), str(ROWS)]
            label = f"aarch64_neon::kquants::{fn}"
        else:
            fn = f"ggml_vec_dot_{fmt.lower().replace('_k', '_K')}_q8_K"
            names = [fn] if fn in syms else []
            if tokens:
                rows, n_tok = GEMM_ROWS, 2
                cmd = lambda b: [paths[who], fmt, str(b), str(rows), "2"]
            else:
                cmd = lambda b: [paths[who], fmt, str(b), str(ROWS)]
            label = fn + (" (nrc = 2)" if tokens else "")
        if len(names) != 1:
            die(f"{label}: {len(names)} symbols match in {paths[who]}")
        lo, size = syms[names[0]]
        traces = []
        for b in (B1, B2):
            seq, out = trace(cmd(b), env)
            bias = 0
            if who == "ours":
                m = re.search(r"marker (0x[0-9a-f]+)", out)
                mk = [s for s in syms if re.search(r"7harness6marker17h", s)]
                if not m or len(mk) != 1:
                    die("the Rust harness printed no marker address")
                bias = int(m.group(1), 16) - syms[mk[0]][0]
            t = kernel_trace(seq, lo, lo + size, bias, dis)
            if not t:
                die(f"{label}: no instruction of it in the trace")
            traces.append(t)
        per = (B2 - B1) * rows * n_tok
        n_ins = (len(traces[1]) - len(traces[0])) / per
        dots = ("sdot", "smmla")
        n_sdot = (sum(i[0] in dots for i in traces[1]) - sum(i[0] in dots for i in traces[0])) / per
        cells = {}
        for cpu in cpus:
            (c1, r1), (c2, r2) = mca_total(traces[0], cpu), mca_total(traces[1], cpu)
            cells[cpu] = ((c2 - c1) / per, (r2 - r1) / per)
        return label, n_ins, n_sdot, cells

    if "gemm" in tables:
        gemm_table(measure)
    if "gemv" not in tables:
        return

    results = {}
    for fmt in FORMATS:
        for who, tier in (("ours", "neon"), ("ours", "dotprod"), ("llama", None)):
            print(f"arm_mca_kq: {fmt} {who} {tier or ''}", file=sys.stderr)
            results[(fmt, who, tier)] = measure(who, fmt, tier)

    print("### ARM K-quant matrix-vector kernels, static (llvm-mca over an execution trace), cycles per super-block (256 weights) per row\n")
    print(f"The instructions one super-block executes, from a qemu-aarch64 trace of each kernel over {ROWS} rows of {B1} and of {B2} super-blocks (difference ÷ {(B2 - B1) * ROWS}: per-call and per-row costs cancel), run through llvm-mca{a.llvm_suffix} as straight-line code. Each cell: cycles per super-block per row, in brackets the resource-only bound. Sanity columns: executed instructions and SDOTs per super-block per row (16 SDOTs = 256 weights). llama.cpp: its `ggml_vec_dot_<fmt>_q8_K`, same build as the table above. Lower is better.\n")
    print("| format | -mcpu | ours neon | ours dotprod | llama.cpp (dotprod) | llama ÷ ours dotprod | instructions · SDOTs per super-block, ours neon / dotprod / llama |")
    print("|---|---|---|---|---|---|---|")
    for fmt in FORMATS:
        n, d, l = (results[(fmt, "ours", "neon")], results[(fmt, "ours", "dotprod")], results[(fmt, "llama", None)])
        for cpu in arm_mca.CPUS:
            c = lambda r: f"{r[3][cpu][0]:.1f} ({r[3][cpu][1]:.1f})"
            ratio = l[3][cpu][0] / d[3][cpu][0]
            sanity = " / ".join(f"{r[1]:.0f} · {r[2]:.0f}" for r in (n, d, l))
            print(f"| {fmt} | {cpu} | {c(n)} | {c(d)} | {c(l)} | {ratio:.2f}× | {sanity} |")

    print("\n#### What that means for decode, tokens/s (all weights in that format)\n")
    print("Memory bound = bandwidth ÷ weight bytes per token. Compute bound = clock ÷ (cycles per super-block × params / 256) for one core of the dotprod kernel's inner work (× cores for the last column: how many cores it takes to reach the memory bound, perfect scaling). Shapes: Qwen3-1.7B · Qwen3-8B, as the Q1_0 table; hardware as listed under it.\n")
    print("| format | CPU | weights/token (1.7B · 8B) | memory bound | compute bound ours, 1 core | compute bound llama.cpp, 1 core | cores for the memory bound, ours · llama.cpp (of) |")
    print("|---|---|---|---|---|---|---|")
    for fmt, bpb in FORMATS.items():
        for cpu in arm_mca.CPUS:
            ghz, cores, bw, _ = arm_mca.HW[cpu]
            ps = list(arm_mca.MODELS_P.values())
            byts = [p * bpb / 256 for p in ps]
            mem = [bw * 1e9 / x for x in byts]
            c1 = lambda cyc, p: ghz * 1e9 / (cyc * p / 256)
            o = [c1(results[(fmt, "ours", "dotprod")][3][cpu][0], p) for p in ps]
            ll = [c1(results[(fmt, "llama", None)][3][cpu][0], p) for p in ps]
            two = lambda v, f="{:.1f}": " · ".join(f.format(x) for x in v)
            print(f"| {fmt} | {cpu} | {two([x / 1e9 for x in byts], '{:.2f}')} GB | {two(mem)} | {two(o)} | {two(ll)} | {mem[0] / o[0]:.1f} · {mem[0] / ll[0]:.1f} (of {cores}) |")

def gemm_table(measure):
    """The matrix-matrix table (see the module's docstring)."""
    res = {}
    for fmt in FORMATS:
        print(f"arm_mca_kq: {fmt} matrix-matrix", file=sys.stderr)
        res[(fmt, "gemv")] = measure("ours", fmt, "dotprod", cpus=GEMM_CPUS)
        for t in GEMM_TOKENS:
            res[(fmt, "dotprod", t)] = measure("ours", fmt, "dotprod", t, GEMM_CPUS)
            res[(fmt, "i8mm", t)] = measure("ours", fmt, "i8mm", t, I8MM_CPUS)
        res[(fmt, "llama")] = measure("llama", fmt, None, cpus=GEMM_CPUS)
        if fmt in LLAMA_NRC2:
            res[(fmt, "llama2")] = measure("llama_i8mm", fmt, None, 2, I8MM_CPUS)
    tok = " · ".join(map(str, GEMM_TOKENS))
    print("### ARM K-quant matrix-matrix kernels, static (llvm-mca over an execution trace), cycles per super-block (256 weights) per row per token\n")
    print(f"As the matrix-vector table, over {GEMM_ROWS} rows × {tok} tokens of {B1} and {B2} super-blocks (llama.cpp's nrc = 2: {GEMM_ROWS} rows × 2 tokens); each cell cycles per super-block per row per token (ours gemm: with {tok} tokens), the matrix-vector kernels (one token) for comparison. SMMLA cells only on neoverse-v1. Lower is better.\n")
    print(f"| format | -mcpu | ours gemv dotprod | ours gemm dotprod ({tok} tok) | ours gemm i8mm ({tok} tok) | llama.cpp gemv (dotprod) | llama.cpp nrc = 2 (i8mm) | ours gemv ÷ best ours gemm ({tok} tok) | llama nrc=2 ÷ ours i8mm ({tok} tok) | instructions · SDOT/SMMLA per super-block·row·token: gemv / gemm dotprod / gemm i8mm ({SANITY_TOKENS} tok) / llama nrc=2 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    dash = "—"
    for fmt in FORMATS:
        g, l, l2 = res[(fmt, "gemv")], res[(fmt, "llama")], res.get((fmt, "llama2"))
        for cpu in GEMM_CPUS:
            cyc = lambda r: r[3][cpu][0] if r and cpu in r[3] else None
            one = lambda r: f"{cyc(r):.1f}" if cyc(r) else dash
            many = lambda k: " · ".join(one(res[(fmt, k, t)]) for t in GEMM_TOKENS) if cyc(res[(fmt, k, GEMM_TOKENS[0])]) else dash
            best = lambda t: min(x for x in (cyc(res[(fmt, k, t)]) for k in ("dotprod", "i8mm")) if x)
            speed = " · ".join(f"{cyc(g) / best(t):.2f}×" for t in GEMM_TOKENS)
            i8 = [cyc(res[(fmt, "i8mm", t)]) for t in GEMM_TOKENS]
            vs = " · ".join(f"{cyc(l2) / x:.2f}×" for x in i8) if cyc(l2) and all(i8) else dash
            t0 = SANITY_TOKENS
            sanity = " / ".join(f"{r[1]:.0f} · {r[2]:.0f}" if r else dash for r in (g, res[(fmt, "dotprod", t0)], res[(fmt, "i8mm", t0)], l2))
            print(f"| {fmt} | {cpu} | {one(g)} | {many('dotprod')} | {many('i8mm')} | {one(l)} | {one(l2)} | {speed} | {vs} | {sanity} |")
    print()


if __name__ == "__main__":
    main()
