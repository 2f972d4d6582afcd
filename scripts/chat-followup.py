"""Measures what a chat follow-up turn costs on a running `oxibonsai serve`: turn 1 (a long system
prompt and a question), then turn 2 (the whole history, the reply included, and a new question),
then the same turn-2 messages with nothing in the prefix cache (a cold prompt, for
comparison: its first word changed). Prints, per request, prompt tokens, tokens taken from the prefix cache, tokens
recomputed by the server (its `oxibonsai_prompt_tokens_recomputed_total` and the prompt counter
deltas) and the time to the answer.

    python3 scripts/chat-followup.py http://127.0.0.1:8080 [--system-tokens 1500] [--rounds 3]

Serve with `--metrics` and `--parallel 2` (or more) so each round's turns keep their slot.
"""
import argparse
import json
import statistics
import time
import urllib.request


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def chat(base, messages, max_tokens):
    before = (metric(base, "oxibonsai_prompt_tokens_total"),
              metric(base, "oxibonsai_prompt_tokens_recomputed_total"))
    t = time.perf_counter()
    out = post(base, "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens,
                                              "temperature": 0})
    dt = time.perf_counter() - t
    after = (metric(base, "oxibonsai_prompt_tokens_total"),
             metric(base, "oxibonsai_prompt_tokens_recomputed_total"))
    usage = out["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return out["choices"][0]["message"], {
        "prompt": usage["prompt_tokens"], "cached": cached,
        "computed": int(after[0] - before[0]), "recomputed": int(after[1] - before[1]),
        "seconds": dt,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--system-tokens", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    sentence = "The harbour committee reviewed the tide tables, the pilots' rota and the new quay. "
    rows = {"turn 1": [], "turn 2 (follow-up)": [], "turn 2 cold": []}
    for r in range(a.rounds):
        system = f"Round {r}. " + sentence * (a.system_tokens // 17)
        turn1 = [{"role": "system", "content": system},
                 {"role": "user", "content": "Summarise the meeting in one line."}]
        reply, s1 = chat(a.base, turn1, a.max_tokens)
        turn2 = turn1 + [{"role": "assistant", "content": reply.get("content") or ""},
                         {"role": "user", "content": "And who chaired it?"}]
        _, s2 = chat(a.base, turn2, a.max_tokens)
        # The same turn 2 with its first word changed: as long, nothing cached (a cold prompt).
        cold = [dict(turn2[0], content="round" + turn2[0]["content"][5:])] + turn2[1:]
        _, s3 = chat(a.base, cold, a.max_tokens)
        rows["turn 1"].append(s1)
        rows["turn 2 (follow-up)"].append(s2)
        rows["turn 2 cold"].append(s3)
    print("| request | prompt tokens | from the prefix cache | computed | recomputed from a checkpoint | seconds (mean ± sd) |")
    print("|---|---|---|---|---|---|")
    for name, runs in rows.items():
        if not runs:
            continue
        secs = [x["seconds"] for x in runs]
        sd = statistics.stdev(secs) if len(secs) > 1 else 0.0
        col = lambda k: "/".join(str(x[k]) for x in runs)
        print(f"| {name} | {col('prompt')} | {col('cached')} | {col('computed')} | {col('recomputed')} "
              f"| {statistics.mean(secs):.2f} ± {sd:.2f} |")


if __name__ == "__main__":
    main()
