"""Load on `oxibonsai serve`: many concurrent streaming clients for a fixed time.

Usage: python load.py BASE_URL SECONDS CLIENTS [SEED]
Each client loops until the time is up, choosing per request: 80 % a streamed chat or text
completion read to the end, 10 % a stream abandoned mid-way (the connection is closed), 10 % an
invalid request (bad JSON or a bad field), which must get 400 in OpenAI's error shape.
Any 5xx, any other unexpected status, a transport error, or a stream that does not end properly
is a failure. Prints a summary (one JSON line last); exit code 1 on any failure.
"""

import asyncio
import collections
import json
import random
import sys
import time

import httpx

BASE, SECONDS, CLIENTS = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else 1

SYSTEM = "You are a concise assistant. Answer in one or two sentences."
QUESTIONS = [
    "What is the capital of France?",
    "Name three colors of the rainbow.",
    "Why is the sky blue?",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "What is 12 times 12?",
    "Give me a tip for learning to cook.",
    "What does a bee make?",
]
PROMPTS = ["Once upon a time", "The recipe for bread is", "def fibonacci(n):", "Dear diary, today"]

# Invalid requests: (name, raw body or JSON value, endpoint). Every one must get 400.
LONG = " ".join(["word"] * 2000)  # beyond the slot's context
INVALID = [
    ("truncated JSON", b'{"messages": [{"role": "user", "content": "hi"', "chat"),
    ("not JSON", b"hello there", "chat"),
    ("empty body", b"", "chat"),
    ("JSON array body", [], "chat"),
    ("messages missing", {"max_tokens": 4}, "chat"),
    ("messages a number", {"messages": 5}, "chat"),
    ("empty messages", {"messages": []}, "chat"),
    ("unknown role", {"messages": [{"role": "wizard", "content": "hi"}]}, "chat"),
    ("temperature a string", {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "chat"),
    ("negative max_tokens", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -3}, "chat"),
    ("top_p above 1", {"messages": [{"role": "user", "content": "hi"}], "top_p": 7}, "chat"),
    ("n = 17", {"messages": [{"role": "user", "content": "hi"}], "n": 17}, "chat"),
    ("stream a string", {"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "chat"),
    ("stop a number", {"messages": [{"role": "user", "content": "hi"}], "stop": 3, "stream": True}, "chat"),
    ("logit_bias bad key", {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"x": 1}}, "chat"),
    ("too long", {"messages": [{"role": "user", "content": LONG}], "stream": True}, "chat"),
    ("prompt missing", {"max_tokens": 4}, "completion"),
    ("prompt an object", {"prompt": {"a": 1}}, "completion"),
    ("prompt token out of range", {"prompt": [1, 2, 99999999]}, "completion"),
]
PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


class Stats:
    def __init__(self):
        self.kinds = collections.Counter()
        self.statuses = collections.Counter()
        self.tokens = 0
        self.chunks = 0
        self.failures = []
        self.ttft = []

    def fail(self, what):
        if len(self.failures) < 20:
            self.failures.append(what)
        else:
            self.failures[-1] = f"... and more ({what})"


def streamed_request(rng):
    if rng.random() < 0.25:
        body = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(8, 64)}
        path = PATHS["completion"]
    else:
        body = {
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": rng.choice(QUESTIONS)}],
            "max_tokens": rng.randint(8, 96),
        }
        path = PATHS["chat"]
    body.update(stream=True, temperature=rng.choice([0, 0.7, 1.0]), seed=rng.randint(0, 1 << 30))
    if rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    return path, body


async def complete(client, rng, stats):
    path, body = streamed_request(rng)
    started = time.monotonic()
    async with client.stream("POST", path, json=body) as r:
        stats.statuses[r.status_code] += 1
        if r.status_code != 200:
            await r.aread()
            stats.fail(f"stream {path}: status {r.status_code}: {r.text[:200]}")
            return
        finish, done, usage, pieces = None, False, None, 0
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                continue
            chunk = json.loads(data)
            if "error" in chunk:
                stats.fail(f"stream {path}: error chunk {data[:200]}")
                return
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                text = c.get("text") or (c.get("delta") or {}).get("content")
                if text:
                    if pieces == 0:
                        stats.ttft.append(time.monotonic() - started)
                    pieces += 1
                finish = c.get("finish_reason") or finish
        stats.chunks += pieces
        if not done or finish not in ("stop", "length"):
            stats.fail(f"stream {path}: ended without [DONE] or finish_reason (done={done}, finish={finish})")
        if "stream_options" in body:
            if not usage or not 0 < usage["completion_tokens"] <= body["max_tokens"]:
                stats.fail(f"stream {path}: bad usage {usage} for max_tokens {body['max_tokens']}")
            else:
                stats.tokens += usage["completion_tokens"]
        else:
            stats.tokens += pieces


async def abandon(client, rng, stats):
    path, body = streamed_request(rng)
    body["max_tokens"] = 200
    # Some leave before the first token (possibly still queued), most after a few.
    wanted = 0 if rng.random() < 0.2 else rng.randint(1, 8)
    async with client.stream("POST", path, json=body) as r:
        stats.statuses[r.status_code] += 1
        if r.status_code != 200:
            await r.aread()
            stats.fail(f"abandoned stream {path}: status {r.status_code}: {r.text[:200]}")
            return
        seen = 0
        async for line in r.aiter_lines():
            if seen >= wanted:
                break
            if line.startswith("data:") and '"finish_reason":null' in line.replace(" ", ""):
                seen += 1
    # Leaving the block closes the half-read response, and with it the connection.


async def invalid(client, rng, stats):
    name, body, endpoint = rng.choice(INVALID)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = await client.post(PATHS[endpoint], content=content, headers={"Content-Type": "application/json"})
    stats.statuses[r.status_code] += 1
    if r.status_code != 400:
        stats.fail(f"invalid request '{name}': status {r.status_code}: {r.text[:200]}")
        return
    try:
        error = r.json()["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert "type" in error and "param" in error and "code" in error
    except (ValueError, KeyError, TypeError, AssertionError):
        stats.fail(f"invalid request '{name}': not OpenAI's error shape: {r.text[:200]}")


async def client_loop(i, deadline, stats):
    rng = random.Random(SEED * 1000 + i)
    limits = httpx.Limits(max_connections=2)
    async with httpx.AsyncClient(base_url=BASE, timeout=httpx.Timeout(300.0), limits=limits) as client:
        while time.monotonic() < deadline:
            roll = rng.random()
            kind = "abandon" if roll < 0.1 else "invalid" if roll < 0.2 else "complete"
            stats.kinds[kind] += 1
            try:
                await {"abandon": abandon, "invalid": invalid, "complete": complete}[kind](client, rng, stats)
            except httpx.HTTPError as e:
                stats.statuses["transport error"] += 1
                stats.fail(f"{kind}: {type(e).__name__}: {e}")


async def main():
    stats = Stats()
    started = time.monotonic()
    await asyncio.gather(*(client_loop(i, started + SECONDS, stats) for i in range(CLIENTS)))
    elapsed = time.monotonic() - started
    ttft = sorted(stats.ttft)
    summary = {
        "seconds": round(elapsed, 1),
        "clients": CLIENTS,
        "requests": sum(stats.kinds.values()),
        "by_kind": dict(stats.kinds),
        "by_status": {str(k): v for k, v in sorted(stats.statuses.items(), key=str)},
        "completion_tokens": stats.tokens,
        "tokens_per_s": round(stats.tokens / elapsed, 1),
        "ttft_p50_s": round(ttft[len(ttft) // 2], 3) if ttft else None,
        "ttft_p99_s": round(ttft[len(ttft) * 99 // 100], 3) if ttft else None,
        "failures": stats.failures,
    }
    for key, value in summary.items():
        print(f"{key:>18}: {value}")
    print(json.dumps(summary))
    sys.exit(1 if stats.failures else 0)


asyncio.run(main())
