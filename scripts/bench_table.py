"""Summarizes scripts/bench-side-by-side.sh's JSON lines into the Markdown table of BENCHMARKS.md:
per file, each engine's pp / tg tokens/s as mean ± sd over every repetition of every round, the ratio
ours ÷ reference, and decode against the bandwidth limit (bandwidth ÷ bytes read per token).
usage: python3 bench_table.py results.jsonl
"""
import json, os, statistics, sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bw = [r["bandwidth_gb_s"] for r in rows if "bandwidth_gb_s" in r]
runs = defaultdict(lambda: defaultdict(list))
sizes = {}
lengths = defaultdict(dict)  # file -> engine -> (pp tokens, tg tokens)
for r in rows:
    if "file" not in r:
        continue
    eng = "ours" if r.get("engine") == "oxibonsai" else "ref"
    runs[r["file"]][eng + "_pp"].append(r["pp_tokens_per_s"])
    runs[r["file"]][eng + "_tg"].append(r["tg_tokens_per_s"])
    lengths[r["file"]][eng] = (r.get("pp_tokens"), r.get("tg_tokens"))
    if r.get("model_bytes"):
        sizes[r["file"]] = r["model_bytes"]
    elif os.path.exists(r["model"]):
        sizes.setdefault(r["file"], os.path.getsize(r["model"]))

def ms(v):
    v = [x for x in v if x is not None]
    if not v:
        return None, None
    return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)

def fmt(v):
    m, s = ms(v)
    return "—" if m is None else f"{m:.1f} ± {s:.1f}"

def ratio(a, b):
    ma, _ = ms(a); mb, _ = ms(b)
    return "—" if not ma or not mb else f"{ma / mb:.2f}×"

lo, hi = (min(bw), max(bw)) if bw else (0, 0)
print(f"Memory read bandwidth during the run (2 threads): {lo:.1f}–{hi:.1f} GB/s, median {statistics.median(bw) if bw else 0:.1f}\n")
dots = [r for r in rows if "vpdpbusd_g_s" in r and "onebit_g_s" in r]
if dots:
    d = [r["vpdpbusd_g_s"] for r in dots]; o = [r["onebit_g_s"] for r in dots]
    print(f"Both threads at once (scripts/vnni_peak.c): `vpdpbusd` {min(d):.2f}–{max(d):.2f} G/s, median "
          f"{statistics.median(d):.2f}; 1-bit steps {min(o):.2f}–{max(o):.2f} G/s, median {statistics.median(o):.2f} "
          f"(× 64 int8 products each)\n")
print("| file (size) | oxibonsai pp | llama.cpp pp | pp ratio | oxibonsai tg | llama.cpp tg | tg ratio | tg limit (median bw ÷ size) | share of limit |")
print("|---|---|---|---|---|---|---|---|---|")
for f, d in runs.items():
    size = sizes.get(f, 0)
    limit = statistics.median(bw) * 1e9 / size if bw and size else None
    tg, _ = ms(d["ours_tg"])
    share = f"{100 * tg / limit:.0f} %" if limit and tg else "—"
    # The reference measured on other lengths (its slow paths): say which.
    ours_len, ref_len = lengths[f].get("ours"), lengths[f].get("ref")
    ref_pp, ref_tg = fmt(d["ref_pp"]), fmt(d["ref_tg"])
    if ours_len and ref_len and ours_len != ref_len:
        ref_pp += f" (pp{ref_len[0]})"
        ref_tg += f" (tg{ref_len[1]})"
    print(f"| {f} ({size / 2**20:.0f} MiB) | {fmt(d['ours_pp'])} | {ref_pp} | {ratio(d['ours_pp'], d['ref_pp'])} | "
          f"{fmt(d['ours_tg'])} | {ref_tg} | {ratio(d['ours_tg'], d['ref_tg'])} | "
          f"{'—' if not limit else f'{limit:.0f}'} | {share} |")
