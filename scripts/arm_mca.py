#!/usr/bin/env python3
"""Helper of scripts/arm-mca.sh (run that, not this): static llvm-mca figures for the aarch64
matrix-vector inner loops and the packed kernels that serve decode, ours against llama.cpp's, as
a Markdown table on stdout.

Inputs (all on the command line, prepared by arm-mca.sh):
  --rlib      the aarch64 release rlib of oxibonsai-formats (built with its line-table debug info)
  --neon-mod  crates/formats/src/kernels/aarch64_neon/mod.rs (which kernel serves which format)
  --llama-obj llama.cpp's ggml-cpu/arch/arm/quants.c compiled to an aarch64 object
  --llvm-suffix  e.g. "-19": the llvm-mca / llvm-objdump / llvm-dwarfdump to use

How a hot loop is found, by name, never by address:
  * ours: mod.rs's tier tables name the kernel of each format (`FormatKind::Q1_0 =>
    Some(safe_gemv!(check_lengths, q1_0::gemv_dotprod, Q1_0))` in `fn gemv_dotprod`). The kernel
    is usually inlined into its safe wrapper, so its code is located through DWARF: every
    subprogram or inlined-subroutine whose linkage name is `…aarch64_neon::<mod>::<fn>` gives
    address ranges inside a concrete function (its own `.text.<symbol>` section).
  * ours, packed: packed.rs's `fn packed_dotprod` names the packed kernel of each format
    (`FormatKind::Q1_0 => Some(k_q1_0::DOTPROD)`): with packing on (the default) it is what
    single-token decode runs on dotprod / i8mm. Its one-token tile (the inlined subroutine
    `gemm::dotprod_tile<…, 1>` inside `packed::<module>::dotprod`, told apart from the 2- and
    4-token tiles by its DWARF name) is measured; an iteration covers 16 weights per SDOT.
  * llama.cpp: the out-of-line symbol `ggml_vec_dot_<fmt>_<act>`.
  Within those ranges every backward branch closes a loop; the innermost loops (no other loop
  inside) are candidates and the one with the most SIMD instructions is the hot loop (this
  passes over scalar tail loops). Its straight-line body, branch included, goes to llvm-mca.

Weights per iteration are inferred from the loop's constant pointer increments (`add xN, xN,
#imm`, post-indexed loads), matched against the weight block and activation block sizes; the
table states the figure and its evidence, and `?` where nothing matched (no figure then).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# format: (GGUF weight block bytes, weights per block, activation format, act block bytes,
#          act values per block, llama.cpp function)
FORMATS = {
    "Q1_0": (18, 128, "Q8_0", 34, 32, "ggml_vec_dot_q1_0_q8_0"),
    "TQ2_0": (66, 256, "Q8_K", 292, 256, "ggml_vec_dot_tq2_0_q8_K"),
    "TQ1_0": (54, 256, "Q8_K", 292, 256, "ggml_vec_dot_tq1_0_q8_K"),
    "Q2_0": (18, 64, "Q8_0", 34, 32, "ggml_vec_dot_q2_0_q8_0"),
    "Q4_0": (18, 32, "Q8_0", 34, 32, "ggml_vec_dot_q4_0_q8_0"),
    "Q4_1": (20, 32, "Q8_1", 36, 32, "ggml_vec_dot_q4_1_q8_1"),
    "Q8_0": (34, 32, "Q8_0", 34, 32, "ggml_vec_dot_q8_0_q8_0"),
    "Q5_0": (22, 32, "Q8_0", 34, 32, "ggml_vec_dot_q5_0_q8_0"),
    "Q5_1": (24, 32, "Q8_1", 36, 32, "ggml_vec_dot_q5_1_q8_1"),
    # The K-quants are measured by arm_mca_kq.py instead: their work per 256-weight block is a
    # nest of loops, which this script's "one loop iteration" reading does not fit (its
    # figures came out 4× too good).
}
# Rows of a packed group (aarch64_neon/gemm.rs `GROUP`): one pass of a packed kernel covers them.
PACKED_ROWS = 8
CPUS = ["apple-m1", "neoverse-n1", "cortex-a76"]
# llvm-mca resource-name prefix -> scheduling model it belongs to.
MODELS = {
    "Cy": "Cyclone (Apple A7)",
    "N1": "Neoverse-N1",
    "A57": "Cortex-A57",
    "A55": "Cortex-A55",
    "A53": "Cortex-A53",
    "M1": "Apple M1",
    "N2": "Neoverse-N2",
    "V1": "Neoverse-V1",
    "A510": "Cortex-A510",
    "THX": "ThunderX",
    "Ampere": "Ampere-1",
}
NATIVE = {"apple-m1": ("M1",), "neoverse-n1": ("N1",), "cortex-a76": ("A76",)}

BRANCH = re.compile(r"^(b|b\.\w+|cbz|cbnz|tbz|tbnz)$")
TOOLS = {}


def die(msg):
    print(f"arm_mca.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"{' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return r.stdout


# ---------------------------------------------------------------- which kernel serves a format


def table_kernels(mod_rs):
    """{tier table fn name: {FORMAT: (module, fn)}} from aarch64_neon/mod.rs."""
    src = open(mod_rs).read()
    out = {}
    # Each top-level `fn NAME(kind: FormatKind) -> Option<GemvFn>` body up to the next `\n}`.
    for m in re.finditer(r"\nfn (\w+)\(kind: FormatKind\) -> Option<GemvFn> \{(.*?)\n\}", src, re.S):
        name, body = m.group(1), m.group(2)
        arms = {}
        for arm in re.finditer(r"((?:FormatKind::\w+\s*\|?\s*)+)=>\s*Some\((.*?)\),?\n", body, re.S):
            paths = re.findall(r"\b([a-z]\w*)::(\w+)\b", arm.group(2))
            paths = [p for p in paths if os.path.exists(os.path.join(os.path.dirname(mod_rs), p[0] + ".rs"))]
            if not paths:
                continue
            for kind in re.findall(r"FormatKind::(\w+)", arm.group(1)):
                arms[kind] = paths[0]
        out[name] = arms
    return out


def packed_kernels(packed_rs):
    """{FORMAT: module} from aarch64_neon/packed.rs's `fn packed_dotprod` (`FormatKind::Q1_0 =>
    Some(k_q1_0::DOTPROD)`): the packed kernels that serve decode on `dotprod` and `i8mm`."""
    src = open(packed_rs).read()
    m = re.search(r"\npub\(super\) fn packed_dotprod\(kind: FormatKind\) -> Option<PackedKernel> \{(.*?)\n\}", src, re.S)
    if not m:
        die(f"no `fn packed_dotprod` table in {packed_rs}")
    out = {}
    for arm in re.finditer(r"((?:FormatKind::\w+\s*\|?\s*)+)=>\s*Some\((\w+)::DOTPROD\)", m.group(1)):
        for kind in re.findall(r"FormatKind::(\w+)", arm.group(1)):
            out[kind] = arm.group(2)
    return out


# ---------------------------------------------------------------- DWARF: where a kernel's code is


def parse_dwarf(obj):
    """Yield DIEs as dicts: depth, tag, attrs (raw text per attribute), offset."""
    text = run([TOOLS["dwarfdump"], "--debug-info", obj])
    dies, cur = [], None
    for line in text.splitlines():
        m = re.match(r"^0x([0-9a-f]+):( *)(DW_TAG_\w+)", line)
        if m:
            cur = {"off": int(m.group(1), 16), "depth": len(m.group(2)), "tag": m.group(3), "attrs": {}, "last": None}
            dies.append(cur)
            continue
        if cur is None:
            continue
        m = re.match(r"^\s+(DW_AT_\w+)\s+(.*)$", line)
        if m:
            cur["attrs"][m.group(1)] = m.group(2)
            cur["last"] = m.group(1)
        elif line.strip().startswith("[0x") and cur["last"]:
            cur["attrs"][cur["last"]] += " " + line.strip()
    return dies


def die_name(d):
    for a in ("DW_AT_linkage_name", "DW_AT_abstract_origin", "DW_AT_specification"):
        if a in d["attrs"]:
            m = re.search(r'"([^"]+)"', d["attrs"][a])
            if m:
                return m.group(1)
    return None


def die_ranges(d):
    a = d["attrs"]
    if "DW_AT_low_pc" in a and "DW_AT_high_pc" in a:
        lo = int(re.search(r"0x[0-9a-f]+", a["DW_AT_low_pc"]).group(0), 16)
        hv = re.search(r"0x[0-9a-f]+", a["DW_AT_high_pc"]).group(0)
        hi = int(hv, 16)
        if "(" not in a["DW_AT_high_pc"] or hi < lo:  # an offset, not an address
            hi = lo + hi
        return [(lo, hi)]
    if "DW_AT_ranges" in a:
        return [(int(x, 16), int(y, 16)) for x, y in re.findall(r"\[(0x[0-9a-f]+), (0x[0-9a-f]+)\)", a["DW_AT_ranges"])]
    return []


def kernel_pattern(module, fn):
    # Legacy (`…12aarch64_neon4q1_04gemv17h<hash>E`) and v0 (`…12aarch64_neon4q1_04gemv`) mangling.
    return re.compile(rf"12aarch64_neon{len(module)}{module}{len(fn)}{fn}(17h[0-9a-f]{{16}}E)?$")


def locate_kernel(dies, module, fn):
    """[(symbol of the concrete function, [(lo, hi), ...])] for each copy of the kernel."""
    pat = kernel_pattern(module, fn)
    found = []
    top = None  # (depth, symbol) of the enclosing concrete subprogram
    for d in dies:
        if top and d["depth"] <= top[0]:
            top = None
        if d["tag"] == "DW_TAG_subprogram" and die_ranges(d) and top is None:
            top = (d["depth"], die_name(d))
        if d["tag"] in ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine") and top:
            name = die_name(d)
            if name and pat.search(name):
                rs = die_ranges(d)
                if rs:
                    found.append((top[1], rs))
    return found


def locate_packed(dies, module):
    """[(symbol, ranges)] of the one-token tile (`gemm::dotprod_tile<…, 1>`, or for 2-bit codes in
    value order `packed::crumbs_token<…>`: what single-token decode runs) inlined into
    `packed::<module>::dotprod`."""
    pat = re.compile(rf"12aarch64_neon6packed{len(module)}{module}7dotprod(17h[0-9a-f]{{16}}E)?$")
    by_off = {d["off"]: d for d in dies}
    found, top = [], None
    for d in dies:
        if top and d["depth"] <= top[0]:
            top = None
        if d["tag"] == "DW_TAG_subprogram" and die_ranges(d) and top is None:
            top = (d["depth"], die_name(d))
        if top and top[1] and pat.search(top[1]) and d["tag"] == "DW_TAG_inlined_subroutine":
            m = re.match(r"\((0x[0-9a-f]+)", d["attrs"].get("DW_AT_abstract_origin", ""))
            origin = by_off.get(int(m.group(1), 16)) if m else None
            name = origin["attrs"].get("DW_AT_name", "") if origin else ""
            if re.match(r'\("(dotprod_tile<.*, 1>|crumbs_token<.*>)"\)$', name) and die_ranges(d):
                found.append((top[1], die_ranges(d)))
    return found


def packed_loop(insns, ranges, fmt):
    """(plan, weights, label, description) of a packed one-token tile: its innermost loop with
    the most SDOTs; with one token every SDOT multiplies 16 distinct weights (4 codes × 4 rows
    of the group), so an iteration covers 16 × its SDOTs. When that is part of a weight block
    of the group's rows (a scale's steps), the block is simulated: the loop as many times as
    the block needs and the shortest path back into it (the next block's scales)."""
    loops = loops_in(insns, ranges)
    inner = [l for l in loops if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
    if not inner:
        return None
    sdots = lambda b: sum(i[1] == "sdot" for i in b)
    loop = max(inner, key=lambda l: (sdots(body_of(insns, l)), len(body_of(insns, l))))
    body = body_of(insns, loop)
    if not sdots(body):
        return None
    w = 16 * sdots(body)
    block = FORMATS[fmt][1] * PACKED_ROWS
    desc = f"hot loop {len(body)} instructions, {sdots(body)} SDOTs = {w} weights/iteration ({PACKED_ROWS} rows)"
    label = f"{w // PACKED_ROWS} × {PACKED_ROWS} rows"
    plan = body
    parent = outer_path(insns, ranges, body, fmt, any_step=True)
    if parent and w < block and block % w == 0:
        k = block // w
        plan = body * k + parent
        desc += f"; simulated per {FORMATS[fmt][1]}-weight block of the {PACKED_ROWS} rows: {k} × this loop + the {len(parent)}-instruction shortest path back into it"
        w, label = block, f"{FORMATS[fmt][1]} ({k}×{w // k // PACKED_ROWS} + outer) × {PACKED_ROWS} rows"
    elif w < block:
        desc += "; the per-block code outside this loop is not counted"
        label += ", outer not counted"
    return plan, w, label, desc


# ---------------------------------------------------------------- disassembly and loops


def disassemble(obj, symbol, quiet=False):
    """[(addr, mnemonic, operands)] of `symbol` (addresses are offsets in its section); the
    target of each call is noted in RELOCS[(obj, symbol, addr)]."""
    text = run([TOOLS["objdump"], "-dr", "--no-show-raw-insn", f"--disassemble-symbols={symbol}", obj])
    insns = []
    for line in text.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(R_AARCH64_(?:CALL|JUMP)26)\s+(\S+)", line)
        if m:
            RELOCS[(obj, symbol, int(m.group(1), 16))] = re.sub(r"^\.text\.", "", m.group(3))
            continue
        m = re.match(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        # Other relocations (a constant's address, say) annotate the instruction above them.
        if m and not m.group(2).endswith(">:") and not m.group(2).startswith("R_AARCH64_"):
            insns.append((int(m.group(1), 16), m.group(2), m.group(3).split("//")[0].strip()))
    if not insns and not quiet:
        die(f"no instructions for {symbol} in {obj}")
    return insns


RELOCS = {}


def inline_calls(body, obj, symbol, objs):
    """The loop body with each call to a small leaf function (no branch but its final `ret`, at
    most 16 instructions: e.g. `half`'s f16 -> f32 conversion behind its run-time feature check)
    replaced by the callee's instructions, since llvm-mca models a call as a 100-cycle latency
    with no effect on registers. Returns (body, notes)."""
    out, notes = [], []
    for addr, mn, ops in body:
        target = RELOCS.get((obj, symbol, addr)) if mn == "bl" else None
        callee = None
        if target:
            for o in objs:
                ins = disassemble(o, target, quiet=True)
                if ins:
                    callee = ins
                    break
        if callee and callee[-1][1] == "ret" and len(callee) <= 16 and not any(
            BRANCH.match(i[1]) or i[1] in ("bl", "blr", "br", "ret") for i in callee[:-1]
        ):
            out.extend((addr, i[1], i[2]) for i in callee[:-1])
            notes.append(f"call to `{target}` replaced by its {len(callee) - 1} instruction(s) ({'; '.join(i[1] + ' ' + i[2] for i in callee[:-1])})")
        else:
            out.append((addr, mn, ops))
            if mn in ("bl", "blr"):
                notes.append(f"call to `{target or ops}` left as a call: llvm-mca does not model its callee, the figure is not trustworthy")
    return out, notes


def branch_target(mn, ops):
    if not BRANCH.match(mn):
        return None
    m = re.search(r"(?:^|[ ,])(?:#?)(0x[0-9a-f]+|[0-9a-f]+)\s*(<[^>]*>)?\s*$", ops)
    return int(m.group(1), 16) if m else None


def is_simd(ops):
    """A 64- or 128-bit vector operation (scalar float code in s/h/d registers is not)."""
    return bool(re.search(r"\bv\d+\.\d*[bhsd]\b|\bq\d+\b", ops))


def loops_in(insns, ranges):
    inside = lambda a: any(lo <= a < hi for lo, hi in ranges)
    loops = []
    for addr, mn, ops in insns:
        t = branch_target(mn, ops)
        if t is not None and t <= addr and inside(addr) and inside(t):
            loops.append((t, addr))
    return loops


def body_of(insns, loop):
    return [i for i in insns if loop[0] <= i[0] <= loop[1]]


def hot_loop(insns, ranges, fmt, share=2):
    """(hot loop body, the outer path or None: see `outer_path`). The hot loop: of the innermost loops, the
    one covering the most weights per iteration (a main loop over a tail loop), then the one with
    the most vector instructions."""
    loops = loops_in(insns, ranges)
    inner = [l for l in loops if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
    scored = []
    for l in inner:
        body = body_of(insns, l)
        scored.append((sum(is_simd(i[2]) for i in body), weights_per_iter(body, fmt)[0] or 0, len(body), l, body))
    best = None
    if scored:
        top = max(x[0] for x in scored)
        # Vector-heavy loops only (at least 1/share of the most vector instructions any loop
        # has), then the most weights per iteration (a main loop over its tail loop).
        cands = [x for x in scored if share * x[0] >= top]
        x = max(cands, key=lambda x: (x[1], x[0], x[2]))
        best = (x[:3], x[3], x[4])
    if best is None:
        return None, None
    # A loop whose step cannot be read (no constant pointer increment): its outer path is the
    # shortest way back into it, whatever it steps (the caller says what it takes it for).
    any_step = not weights_per_iter(best[2], fmt)[0]
    return best[2], outer_path(insns, ranges, best[2], fmt, any_step)


def outer_path(insns, ranges, body, fmt, any_step=False):
    """The code that runs between two runs of the hot loop, or None: of the shortest paths (in
    instructions) from each exit of the loop back into it, the shortest one that steps the
    pointers by one weight block (the outer loop's step; an exit to a software fallback, e.g. of
    an f16 conversion, comes back without one). Shortest is the fast path: a software fallback is
    longer than the hardware instruction it stands in for, a row change longer than a block."""
    inside = lambda a: any(lo <= a < hi for lo, hi in ranges)
    index = {ins[0]: n for n, ins in enumerate(insns)}
    in_loop = {i[0] for i in body}

    def succs(n):
        addr, mn, ops = insns[n]
        out = []
        t = branch_target(mn, ops)
        if t is not None and t in index and inside(t):
            out.append(index[t])
        if mn not in ("b", "ret", "br") and n + 1 < len(insns) and inside(insns[n + 1][0]):
            out.append(n + 1)
        return out

    starts = {s for n, ins in enumerate(insns) if ins[0] in in_loop for s in succs(n) if insns[s][0] not in in_loop}
    best = None
    for start in sorted(starts):
        prev = {start: None}
        queue = [start]
        path = None
        while queue and path is None:
            n = queue.pop(0)
            for m in succs(n):
                if insns[m][0] in in_loop:
                    path = [n]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    path = [insns[k] for k in reversed(path)]
                    break
                if m not in prev:
                    prev[m] = n
                    queue.append(m)
        steps_block = any_step or weights_per_iter(path, fmt)[0] == FORMATS[fmt][1] if path else False
        if path and steps_block and (best is None or len(path) < len(best)):
            best = path
    return best


def rows_per_pass(neon_dir, module):
    """Rows one pass of our kernel computes (each iteration of its loop covers that many rows'
    weights for one activation load): the module's `const BAND` / `const ROWS`, else the shared
    row driver's (`lowbit_util::BAND`) when the module uses it, else 1."""
    def band(name):
        path = os.path.join(neon_dir, name + ".rs")
        if not os.path.exists(path):
            return None, ""
        src = open(path).read()
        m = re.search(r"const (?:BAND|ROWS): usize = (\d+);", src)
        return (int(m.group(1)) if m else None), src
    n, src = band(module)
    if n:
        return n
    if "lowbit_util" in src:
        return band("lowbit_util")[0] or 1
    return 1


def weights_per_iter(body, fmt):
    """Weights one iteration covers, from the constant pointer increments in the loop."""
    wb, we, _, ab, ae, _ = FORMATS[fmt]
    incs = []
    for _, mn, ops in body:
        m = re.match(r"^(x\d+), (x\d+), #(0x[0-9a-f]+|\d+)$", ops)
        if mn == "add" and m and m.group(1) == m.group(2):
            incs.append(int(m.group(3), 0))
        m = re.search(r"\], #(0x[0-9a-f]+|\d+)$", ops)  # post-indexed
        if m:
            incs.append(int(m.group(1), 0))
    votes = {}
    for inc in incs:
        for bytes_, elems, what in ((wb, we, "weight"), (ab, ae, "activation")):
            if inc % bytes_ == 0 and inc // bytes_ <= 16:
                w = inc // bytes_ * elems
                votes.setdefault(w, []).append(f"{what} +{inc}")
    if not votes:
        return None, "no stride matched"
    w = max(votes, key=lambda k: len(votes[k]))
    return w, ", ".join(sorted(set(votes[w])))


def mca_input(body):
    top = body[0][0]
    lines = [".Ltop:"]
    for addr, mn, ops in body:
        t = branch_target(mn, ops)
        if t is not None:
            ops = re.sub(r"(?:#?)(0x[0-9a-f]+|[0-9a-f]+)\s*(<[^>]*>)?\s*$", ".Ltop" if t == top else ".Lout", ops)
        ops = re.sub(r"\s*<[^>]*>", "", ops)
        lines.append(f"\t{mn}\t{ops}")
    lines.append(".Lout:")
    return "\n".join(lines) + "\n"


def mca(asm, cpu):
    """(cycles per iteration from the simulation, block reciprocal throughput, model name)."""
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write(asm)
        path = f.name
    try:
        r = subprocess.run([TOOLS["mca"], "-mtriple=aarch64", f"-mcpu={cpu}", "-iterations=1000", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if r.returncode != 0:
        die(f"llvm-mca -mcpu={cpu} failed:\n{r.stderr[-3000:]}\ninput:\n{asm}")
    it = int(re.search(r"^Iterations:\s+(\d+)", r.stdout, re.M).group(1))
    cyc = int(re.search(r"^Total Cycles:\s+(\d+)", r.stdout, re.M).group(1))
    rt = float(re.search(r"^Block RThroughput:\s+([\d.]+)", r.stdout, re.M).group(1))
    res = re.search(r"^\[[\d.]+\]\s+- ([A-Za-z0-9]+?)(?:Unit|Port)", r.stdout, re.M)
    prefix = res.group(1) if res else "?"
    model = MODELS.get(prefix, prefix)
    return cyc / it, rt, model, prefix


# ---------------------------------------------------------------- tokens/s

# Published figures, per CPU: (clock GHz, cores used for decode, memory bandwidth GB/s, source).
HW = {
    "apple-m1": (3.2, 4, 68.25, "Apple M1: 4 Firestorm P-cores at 3.2 GHz; LPDDR4X-4266 on a 128-bit bus = 68.25 GB/s (Apple spec; AnandTech measured ~58 GB/s from one core)"),
    "neoverse-n1": (2.5, 64, 204.8, "AWS Graviton2 (Neoverse-N1): 64 cores at 2.5 GHz; 8 × DDR4-3200 channels = 204.8 GB/s per socket (AWS), i.e. 3.2 GB/s per core share"),
    "cortex-a76": (2.4, 4, 17.07, "Raspberry Pi 5 (BCM2712, Cortex-A76): 4 cores at 2.4 GHz; 32-bit LPDDR4X-4267 = 17.07 GB/s (Raspberry Pi product brief)"),
}
# Weights read per decoded token: every linear layer plus the output head (Qwen3 model cards:
# 1.7B = 1.4B non-embedding + tied 151936×2048 head; 8B = 6.95B non-embedding + 151936×4096 head).
MODELS_P = {"Bonsai-1.7B": 1.40e9 + 151936 * 2048, "Bonsai-8B": 6.95e9 + 151936 * 4096}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlib", required=True)
    ap.add_argument("--neon-mod", required=True)
    ap.add_argument("--llama-obj", required=True)
    ap.add_argument("--llvm-suffix", default="")
    ap.add_argument("--llama-version", default="?")
    ap.add_argument("--rustc", default="?")
    ap.add_argument("--clang", default="?")
    a = ap.parse_args()
    for t, n in (("mca", "llvm-mca"), ("objdump", "llvm-objdump"), ("dwarfdump", "llvm-dwarfdump")):
        TOOLS[t] = shutil.which(n + a.llvm_suffix) or die(f"missing tool {n}{a.llvm_suffix}")

    tables = table_kernels(a.neon_mod)
    packed = packed_kernels(os.path.join(os.path.dirname(a.neon_mod), "packed.rs"))
    tiers = [("neon", tables.get("gemv", {})), ("dotprod", tables.get("gemv_dotprod", {}))]

    work = tempfile.mkdtemp(prefix="arm-mca-")
    subprocess.run(["ar", "x", os.path.abspath(a.rlib)], cwd=work, check=True)
    objs = sorted(os.path.join(work, f) for f in os.listdir(work) if f.endswith(".o"))
    dies = {o: parse_dwarf(o) for o in objs}

    def ours(fmt, tier_arms):
        if fmt not in tier_arms:
            return None
        module, fn = tier_arms[fmt]
        for o in objs:
            for sym, ranges in locate_kernel(dies[o], module, fn):
                body, parent = hot_loop(disassemble(o, sym), ranges, fmt)
                if body:
                    body, cnotes = inline_calls(body, o, sym, objs)
                    if parent:
                        parent, pnotes = inline_calls(parent, o, sym, objs)
                        cnotes += [f"outer path: {n}" for n in pnotes]
                    return body, parent, f"{module}::{fn}", cnotes
        # Not fatal: the table still prints, this cell says so.
        return None, None, f"{module}::{fn}", None

    llama_syms = set(re.findall(r"\s(ggml_vec_dot_\w+)$", run(["nm", a.llama_obj]), re.M))

    rows, notes, models = [], [], {}
    for fmt, (wb, we, act, ab, ae, lfn) in FORMATS.items():
        loops, lost = {}, set()
        for tier, arms in tiers:
            r = ours(fmt, arms)
            if r and r[0] is None:
                notes.append(f"{fmt} ours {tier}: the tier table names `{r[2]}` but no loop of it was located in the rlib (by its DWARF linkage name): not measured")
                lost.add(f"ours {tier}")
            elif r:
                loops[f"ours {tier}"] = r
        if lfn in llama_syms:
            # share=3: clang vectorizes llama.cpp's scalar tail loop (one block an iteration)
            # into more vector instructions than some main loops (two blocks an iteration)
            # have, e.g. Q4_1's 39 against 19.
            body, parent = hot_loop(disassemble(a.llama_obj, lfn), [(0, 1 << 62)], fmt, share=3)
            body, cnotes = inline_calls(body, a.llama_obj, lfn, [a.llama_obj])
            loops["llama.cpp"] = (body, parent, lfn, cnotes)
        else:
            notes.append(f"{fmt}: llama.cpp has no `{lfn}` in this source")
        # Per measured loop: how its cost per iteration is made, and the weights it covers.
        plans = {}
        for who, (body, parent, name, cnotes) in loops.items():
            w, why = weights_per_iter(body, fmt)
            band = rows_per_pass(os.path.dirname(a.neon_mod), name.split("::")[0]) if who.startswith("ours") else 1
            plan = [(1, body)]
            label = str(w) if w else "?"
            desc = f"hot loop {len(body)} instructions, {w if w else '?'} weights/iteration ({why})"
            # A hot loop over part of a block (one Q8_0 block of a Q1_0 block, say) is only part
            # of the cost: simulate one whole block instead, k copies of the loop body followed by
            # the outer path back into it, when that path's pointer strides say it steps one block.
            if w and parent and w < we and we % w == 0:
                pw, pwhy = weights_per_iter(parent, fmt)
                if pw == we:
                    k = we // w
                    plan = [(1, body * k + parent)]
                    desc += f"; simulated per {we}-weight block: {k} × this loop + the {len(parent)}-instruction path back into it ({pwhy})"
                    w, label = we, f"{we} ({k}×{w} + outer)"
            # Our Q8_K-partner kernels (TQ1_0, TQ2_0) walk their four rows in an inner loop: one
            # iteration is one row's whole block, its pointers taken from the band's row array and
            # the activation block's address computed by a multiply (no constant step to read).
            # Taken as such when our loop's step is unreadable and it has a way back into it (the
            # next block's shared work): `band` copies of the loop and that path, per band block.
            if not w and band > 1 and parent:
                plan = [(1, body * band + parent)]
                desc += f"; taken as one row's {we}-weight block per iteration (the row loop of a {band}-row band; its step is computed, not a constant); simulated per band block: {band} × this loop + the {len(parent)}-instruction shortest path back into it"
                w, label = we * band, f"{we} × {band} rows (row loop + outer)"
                band = 1
            if len(plan) == 1 and w and w < we:
                desc += f"; the per-block code outside this loop ({we // w} iterations per {we}-weight block) is not counted"
                label = f"{w}, outer not counted"
            if cnotes:
                desc += "; " + "; ".join(cnotes)
                label += ", call inlined" if all("replaced" in n for n in cnotes) else ", CALL"
            if w and band > 1:
                # One activation load serves `rows` rows: an iteration covers each row's weights.
                desc += f"; {band} rows a pass, so an iteration covers {band} × {w} weights"
                w, label = w * band, f"{label} × {band} rows"
            plans[who] = (w, label, plan)
            notes.append(f"{fmt} {who} (`{name}`): {desc}")
        # What decode runs on dotprod / i8mm with packing on (the default): the packed kernel.
        if fmt in packed:
            module, r = packed[fmt], None
            for o in objs:
                for sym, ranges in locate_packed(dies[o], module):
                    r = packed_loop(disassemble(o, sym), ranges, fmt)
                    if r:
                        break
                if r:
                    break
            if r:
                body, w, label, desc = r
                plans["ours packed"] = (w, label, [(1, body)])
                notes.append(f"{fmt} ours packed (`packed::{module}::dotprod`, its one-token tile): {desc}")
            else:
                notes.append(f"{fmt} ours packed: `packed::{module}::dotprod` is registered but its one-token tile was not located in the rlib: not measured")
                lost.add("ours packed")
        for cpu in CPUS:
            cells = {}
            for who, (w, label, plan) in plans.items():
                cyc = rt = 0.0
                for k, b in plan:
                    c, r, model, prefix = mca(mca_input(b), cpu)
                    cyc, rt = cyc + k * c, rt + k * r
                models[cpu] = (model, prefix)
                cells[who] = (cyc * 128 / w, rt * 128 / w) if w else None
            for k in lost:
                cells[k] = "lost"
            rows.append((fmt, cpu, cells, {k: v[1] for k, v in plans.items()}))

    # ---- table 1: cycles per 128 weights
    print(f"### ARM matrix-vector inner loops, static (llvm-mca{a.llvm_suffix}), cycles per 128 weights\n")
    print(f"Ours: oxibonsai-formats aarch64 release rlib ({a.rustc}). llama.cpp: `ggml-cpu/arch/arm/quants.c` from llama-cpp-python {a.llama_version} (sdist), `{a.clang} --target=aarch64-linux-gnu -O3 -march=armv8.2-a+dotprod`.")
    print("Each cell: simulated cycles per iteration (1000 iterations, loop-carried dependencies included) scaled to 128 weights; in brackets the resource-only bound (Block RThroughput). Lower is better.\n")
    print("| format | -mcpu (scheduling model) | weights/iter ours neon · dotprod · packed · llama | ours neon | ours dotprod | ours dotprod packed | llama.cpp | llama ÷ ours decode on dotprod (>1: ours faster) |")
    print("|---|---|---|---|---|---|---|---|")
    best_cyc = {}
    for fmt, cpu, cells, wpi in rows:
        model, prefix = models.get(cpu, ("?", "?"))
        native = prefix in NATIVE[cpu]
        mlabel = f"{cpu} ({model}{'' if native else ', fallback: no own model'})"
        if not cells:
            print(f"| {fmt} | {mlabel} | — | no NEON kernel yet | no NEON kernel yet | — | no llama.cpp loop | — |")
            continue
        def fmt_cell(k):
            v = cells.get(k)
            if v == "lost":
                return "kernel not located (see notes)"
            if v:
                return f"{v[0]:.1f} ({v[1]:.1f})"
            if k in cells:
                return "? (weights/iteration unknown)"
            return "no NEON kernel yet" if k.startswith("ours") else "—"

        w = " · ".join(str(wpi.get(k, "—") or "?") for k in ("ours neon", "ours dotprod", "ours packed", "llama.cpp"))
        # Decode on dotprod runs the packed kernel where the format has one (packing is on by
        # default), else the matrix-vector kernel: that is what the ratio compares.
        decode = "ours packed" if "ours packed" in cells else "ours dotprod"
        ours = cells[decode][0] if isinstance(cells.get(decode), tuple) else None
        llama = cells["llama.cpp"][0] if isinstance(cells.get("llama.cpp"), tuple) else None
        ratio = f"{llama / ours:.2f}×" if ours and llama else "—"
        best_cyc[(fmt, cpu)] = (ours, llama)
        packed_cell = fmt_cell("ours packed") if "ours packed" in cells else "no packed kernel"
        print(f"| {fmt} | {mlabel} | {w} | {fmt_cell('ours neon')} | {fmt_cell('ours dotprod')} | {packed_cell} | {fmt_cell('llama.cpp')} | {ratio} |")

    # ---- table 2: tokens/s
    print("\n### What that means for decode (Q1_0), tokens/s\n")
    print("Memory bound = bandwidth ÷ weight bytes per token (params × 18/128). Compute bound = clock ÷ (cycles/128 weights × params/128) for one core, in brackets × the cores listed below (perfect scaling); the inner loop only, of the kernel decode runs on the dotprod tier (the packed one).\n")
    print("| CPU | model | weights/token | memory bound | compute bound ours (1 core) | compute bound llama.cpp (1 core) | cores ours needs for the memory bound |")
    print("|---|---|---|---|---|---|---|")
    for cpu in CPUS:
        ghz, cores, bw, _ = HW[cpu]
        o, l = best_cyc.get(("Q1_0", cpu), (None, None))
        for mname, p in MODELS_P.items():
            byts = p * 18 / 128
            mem = bw * 1e9 / byts
            blocks = p / 128
            c1 = lambda c: ghz * 1e9 / (c * blocks) if c else None
            f = lambda x: f"{x:.1f}" if x else "—"
            need = f"{mem / c1(o):.1f} of {cores}" if o else "—"
            print(f"| {cpu} | {mname} | {byts / 1e9:.2f} GB | {mem:.1f} | {f(c1(o))} ({f(cores * c1(o)) if o else '—'} on {cores}) | {f(c1(l))} ({f(cores * c1(l)) if l else '—'} on {cores}) | {need} |")
    print("\nAssumed hardware (published figures):\n")
    for cpu in CPUS:
        print(f"- {HW[cpu][3]}")
    print("- Bonsai-1.7B / 8B taken as the Qwen3-1.7B / Qwen3-8B shapes. Weights per token: Qwen3 model cards (1.7B: 1.4B non-embedding + 151936×2048 tied head; 8B: 6.95B non-embedding + 151936×4096 head), all taken as Q1_0.")
    print("\nHow each loop was measured:\n")
    for n in notes:
        print(f"- {n}")
    for cpu in CPUS:
        model, prefix = models.get(cpu, ("?", "?"))
        if prefix not in NATIVE[cpu]:
            print(f"- `-mcpu={cpu}`: this llvm-mca has no scheduling model of its own for it and uses the {model} model.")
    print("- Neoverse-N1 is Arm's server derivative of the Cortex-A76 core (same pipeline), so the neoverse-n1 rows are the better model of a Raspberry Pi 5 core than the cortex-a76 rows (Cortex-A57 model).")
    print("- Not modelled: memory (llvm-mca assumes every load hits L1: no cache misses, no bandwidth limit, no prefetch), branch mispredictions, the loops around the hot one (rows, and the per-block code where the hot loop covers part of a block), calls (`bl`/`ret` themselves), thread scheduling.")


if __name__ == "__main__":
    main()
