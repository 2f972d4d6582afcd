"""Aggregate generation speed of a running `oxibonsai serve` at several concurrencies.

Usage: python bench_serve.py BASE_URL [--streams 1,4,8,16] [--rounds 5] [--max-tokens 128] [--json FILE]
For each round and each concurrency N (interleaved, so the host's drift touches every N alike),
N streamed chat completions start together, each with its own prompt and exactly --max-tokens
tokens (end-of-generation tokens are banned through logit_bias). Aggregate tokens/s = the tokens
of all N streams / the wall time from the first request to the last [DONE]. One warm-up run at the
largest N is not counted. Prints a Markdown table (mean ± sd over rounds).
"""

import argparse
import asyncio
import json
import statistics
import time

import httpx

TOPICS = ["the sea", "a mountain", "a city at night", "the first snow", "an old library", "a robot",
          "a garden", "the desert", "a train journey", "a lighthouse", "autumn", "a market",
          "the moon", "a river", "a small cafe", "a thunderstorm"]


async def one_stream(client, i, max_tokens, ban):
    body = {
        "messages": [{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]}."}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}, "logit_bias": ban,
    }
    started = time.monotonic()
    first, tokens = None, 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            chunk = json.loads(line[5:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                first = time.monotonic() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return tokens, first


async def measure(client, n, max_tokens, ban):
    started = time.monotonic()
    results = await asyncio.gather(*(one_stream(client, i, max_tokens, ban) for i in range(n)))
    wall = time.monotonic() - started
    tokens = sum(t for t, _ in results)
    if tokens != n * max_tokens:
        raise RuntimeError(f"{n} streams gave {tokens} tokens, expected {n * max_tokens}")
    return {"streams": n, "tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall,
            "ttft_s": statistics.mean(f for _, f in results if f is not None)}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--json", help="append one JSON line per measurement to this file")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    limits = httpx.Limits(max_connections=max(streams) + 4)
    async with httpx.AsyncClient(base_url=args.base, timeout=600, limits=limits) as client:
        specials = await client.post("/tokenize", json={"content": "<|im_end|><|endoftext|>", "parse_special": True})
        ban = {str(t): -100 for t in specials.json()["tokens"]}
        await measure(client, max(streams), args.max_tokens, ban)  # warm-up
        runs = {n: [] for n in streams}
        for r in range(args.rounds):
            for n in streams:
                m = await measure(client, n, args.max_tokens, ban)
                runs[n].append(m)
                print(f"round {r + 1} streams {n:>2}: {m['tokens_per_s']:7.1f} tokens/s "
                      f"({m['tokens']} tokens in {m['seconds']:.2f} s, first token after {m['ttft_s']:.2f} s)", flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps({"round": r + 1, **m}) + "\n")

    def mean_sd(values):
        return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

    # The ratio to the lowest concurrency is taken within each round (the same minute of the host),
    # then averaged.
    base = runs[streams[0]]
    print(f"\n| concurrent streams | aggregate tokens/s | per stream tokens/s | × {streams[0]} stream(s), per round "
          "| time to first token (s) |")
    print("|---|---|---|---|---|")
    for n in streams:
        agg, agg_sd = mean_sd([m["tokens_per_s"] for m in runs[n]])
        ratio, ratio_sd = mean_sd([m["tokens_per_s"] / b["tokens_per_s"] for m, b in zip(runs[n], base)])
        ttft, ttft_sd = mean_sd([m["ttft_s"] for m in runs[n]])
        print(f"| {n} | {agg:.1f} ± {agg_sd:.1f} | {agg / n:.1f} | {ratio:.2f}× ± {ratio_sd:.2f} "
              f"| {ttft:.2f} ± {ttft_sd:.2f} |")


asyncio.run(main())
