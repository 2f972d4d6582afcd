"""Conformance of `oxibonsai serve` with the official `openai` Python package.

Usage: python openai_conformance.py BASE_URL API_KEY SMALL_BASE_URL
  BASE_URL        a server started with --api-key API_KEY (and --parallel >= 2)
  SMALL_BASE_URL  a server with --parallel 1 --max-queue 0 and no key (queue-full checks)
Every check prints one line; the first failure raises (exit code 1).
"""

import concurrent.futures
import json
import sys
import threading
import time

import httpx
import jsonschema
import openai

# httpx's own default timeout (5 s) is too short on a loaded 2-core host.
HTTP = httpx.Client(timeout=300)

BASE, KEY, SMALL = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=300)
MODEL = None
USER = [{"role": "user", "content": "Name three colors of the rainbow."}]


def check(name, condition, detail=""):
    if not condition:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok  {name}")


def expect_error(name, fn, status, param=None, code=None):
    try:
        fn()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        check(f"{name}: status {status}", e.status_code == status, f"got {e.status_code}: {e.body}")
        check(f"{name}: OpenAI error shape", "message" in body and "type" in body, f"{e.body}")
        if param is not None:
            check(f"{name}: param {param}", body.get("param") == param, f"{e.body}")
        if code is not None:
            check(f"{name}: code {code}", body.get("code") == code, f"{e.body}")
        return e
    raise AssertionError(f"{name}: no error raised")


def wait_healthy(base):
    for _ in range(600):
        try:
            if HTTP.get(base + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{base} never became healthy")


wait_healthy(BASE)
wait_healthy(SMALL)

# Models.
models = client.models.list()
check("models.list has one model", len(models.data) == 1, f"{models}")
MODEL = models.data[0].id
check("models.retrieve", client.models.retrieve(MODEL).id == MODEL)
expect_error("models.retrieve unknown", lambda: client.models.retrieve("no-such-model"), 404)
for path in ["/v1/models/", "/v1//models", "//v1/models"]:
    r = HTTP.get(BASE + path, headers={"Authorization": f"Bearer {KEY}"})
    check(f"GET {path}", r.status_code == 200 and r.json()["data"][0]["id"] == MODEL, f"{r.status_code} {r.text}")

# Non-stream and stream give the same greedy text. Texts are compared between requests that compute
# the same way: the first request of a prompt runs it through the matrix-matrix kernels, later ones
# reuse its KV and feed the last token alone (a different float summation order can flip a greedy
# near-tie; the engine is not batch-invariant, like the reference). So each prompt is warmed first.
client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1, temperature=0)
full = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=24, temperature=0)
text = full.choices[0].message.content
check("non-stream content", isinstance(text, str) and len(text) > 0, f"{full}")
check("non-stream finish_reason", full.choices[0].finish_reason in ("stop", "length"), f"{full}")
u = full.usage
check("usage adds up", u.total_tokens == u.prompt_tokens + u.completion_tokens and u.completion_tokens > 0, f"{u}")
check("id and object", full.id.startswith("chatcmpl-") and full.object == "chat.completion", f"{full}")
# llama-server's additions that its clients read: `system_fingerprint` (b<build>) and `timings`.
check("system_fingerprint as llama-server writes it", (full.system_fingerprint or "").startswith("b"), f"{full}")
t = (full.model_extra or {}).get("timings") or {}
check("timings count the prompt and the answer",
      t.get("predicted_n") == u.completion_tokens and t.get("prompt_n", -1) + t.get("cache_n", -1) == u.prompt_tokens
      and t.get("predicted_ms", -1) >= 0 and t.get("prompt_per_second", -1) >= 0, f"{t}")

chunks = list(client.chat.completions.create(model=MODEL, messages=USER, max_tokens=24, temperature=0, stream=True))
streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check("stream == non-stream (greedy)", streamed == text, f"{streamed!r} vs {text!r}")
check("stream first delta has the role", chunks[0].choices[0].delta.role == "assistant", f"{chunks[0]}")
check("stream first delta's content is null (llama-server)", chunks[0].choices[0].delta.content is None, f"{chunks[0]}")
check("every chunk has the system_fingerprint", all((c.system_fingerprint or "").startswith("b") for c in chunks))
check("stream ends with a finish_reason", chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason, f"{chunks[-1]}")
check("stream without include_usage has no usage chunk", all(c.usage is None for c in chunks))

chunks = list(client.chat.completions.create(
    model=MODEL, messages=USER, max_tokens=8, temperature=0, stream=True,
    stream_options={"include_usage": True}))
last = chunks[-1]
check("include_usage: last chunk has no choices", last.choices == [], f"{last}")
check("include_usage: last chunk has usage", last.usage is not None and last.usage.completion_tokens == 8, f"{last}")
check("include_usage: the usage chunk has the timings", ((last.model_extra or {}).get("timings") or {}).get("predicted_n") == 8, f"{last}")
chunks = list(client.chat.completions.create(
    model=MODEL, messages=USER, max_tokens=4, temperature=0, stream=True, extra_body={"timings_per_token": True}))
ns = [((c.model_extra or {}).get("timings") or {}).get("predicted_n") for c in chunks]
check("timings_per_token: each token's chunk has the timings so far, the role chunk none",
      ns[0] is None and None not in ns[1:] and ns[1:] == sorted(ns[1:]) and 1 <= ns[1] and ns[-1] == 4, f"{ns}")

# max_completion_tokens and max_tokens.
r = client.chat.completions.create(model=MODEL, messages=USER, max_completion_tokens=5, temperature=0)
check("max_completion_tokens", r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length", f"{r}")

# Stop: a word the greedy answer contains ends the answer before it.
words = [w for w in text.split() if len(w) > 3]
stop = words[len(words) // 2] if words else text[len(text) // 2:]
r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=24, temperature=0, stop=[stop, "@@@"])
check("stop string cuts the answer", r.choices[0].message.content == text[: text.index(stop)], f"{r.choices[0].message.content!r} / stop {stop!r} / {text!r}")
check("stop finish_reason", r.choices[0].finish_reason == "stop", f"{r}")
r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=24, temperature=0, stop=stop)
check("stop as a string", r.choices[0].message.content == text[: text.index(stop)])

# Seeds.
def sampled(seed):
    return client.chat.completions.create(
        model=MODEL, messages=USER, max_tokens=16, temperature=1.0, top_p=0.95, seed=seed
    ).choices[0].message.content
a, b = sampled(1234), sampled(1234)
check("same seed, same text", a == b, f"{a!r} vs {b!r}")
others = {sampled(s) for s in (1, 2, 3)}
check("different seeds vary", len(others | {a}) > 1, f"{others}")

# Logprobs.
r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
content = r.choices[0].logprobs.content
check("logprobs per token", len(content) == r.usage.completion_tokens, f"{r.choices[0].logprobs}")
for t in content:
    check("logprob <= 0 and 3 alternatives", t.logprob <= 0 and len(t.top_logprobs) == 3, f"{t}")
    check("greedy token is the most likely", abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5, f"{t}")
    check("alternatives sorted", t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob)
check("logprob tokens spell the text", "".join(t.token for t in content) == r.choices[0].message.content)

# Other fields are accepted: penalties, top_k/min_p as extensions, logit_bias, chat_template_kwargs.
r = client.chat.completions.create(
    model=MODEL, messages=[{"role": "system", "content": "Be brief."}, {"role": "developer", "content": "Answer in English."}] + USER,
    max_tokens=8, temperature=0.7, presence_penalty=0.5, frequency_penalty=0.5, seed=7,
    extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "chat_template_kwargs": {"enable_thinking": False}})
check("sampling fields accepted", r.usage.completion_tokens > 0)
banned = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1, temperature=0, logprobs=True)
first_token_text = banned.choices[0].message.content
tok = HTTP.post(BASE + "/tokenize", json={"content": first_token_text}, headers={"Authorization": f"Bearer {KEY}"}).json()["tokens"]
r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1, temperature=0, logit_bias={str(tok[0]): -100})
check("logit_bias -100 bans the greedy token", r.choices[0].message.content != first_token_text, f"{r.choices[0].message.content!r}")
r = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": [{"type": "text", "text": "Name three colors"}, {"type": "text", "text": " of the rainbow."}]}],
    max_tokens=24, temperature=0)
check("text parts are joined", r.choices[0].message.content == text, f"{r.choices[0].message.content!r}")

# Structured output: the constraint holds every answer to its schema (a token mask each step).
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                      "role": {"enum": ["admin", "user", "guest"]}}, "required": ["name", "age", "role"], "additionalProperties": False},
    {"type": "object", "properties": {"city": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}, "population": {"type": "integer", "minimum": 0, "maximum": 100000000}},
                                               "required": ["name", "population"], "additionalProperties": False},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3}},
     "required": ["city", "tags"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 2, "maxItems": 4},
]
for i, schema in enumerate(SCHEMAS):
    for seed in (1, 2):
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Answer in JSON about Paris."}], max_tokens=200, temperature=0.9, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}})
        text = r.choices[0].message.content
        check(f"json_schema {i} seed {seed}: finished", r.choices[0].finish_reason == "stop", f"{r}")
        try:
            jsonschema.validate(json.loads(text), schema)
        except Exception as e:
            raise AssertionError(f"json_schema {i} seed {seed}: {e}: {text!r}")
        check(f"json_schema {i} seed {seed}: validates", True)
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Answer in JSON about Paris."}], max_tokens=1, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}})
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Answer in JSON about Paris."}], max_tokens=200, temperature=0, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}) if c.choices)
    plain = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Answer in JSON about Paris."}], max_tokens=200, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}).choices[0].message.content
    check(f"json_schema {i}: stream == non-stream", streamed == plain, f"{streamed!r} vs {plain!r}")
    try:
        jsonschema.validate(json.loads(streamed), schema)
    except Exception as e:
        raise AssertionError(f"json_schema {i} greedy: {e}: {streamed!r}")
r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": 'Reply with the JSON object {"ok": true} and nothing else.'}],
                                   max_tokens=100, temperature=0, response_format={"type": "json_object"})
check("json_object gives an object", isinstance(json.loads(r.choices[0].message.content), dict), f"{r.choices[0].message.content!r}")
r = client.completions.create(model=MODEL, prompt="A list of small numbers:", max_tokens=40, temperature=0.7, seed=3,
                              extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMAS[2]}}})
jsonschema.validate(json.loads(r.choices[0].text), SCHEMAS[2])
check("completions honour response_format", True)

# Completions endpoint.
client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=1, temperature=0)
r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
check("completions non-stream", r.object == "text_completion" and r.usage.completion_tokens == 8 and len(r.choices[0].text) > 0, f"{r}")
s = "".join(c.choices[0].text for c in client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if c.choices)
check("completions stream == non-stream", s == r.choices[0].text, f"{s!r} vs {r.choices[0].text!r}")
ids = HTTP.post(BASE + "/tokenize", json={"content": "The capital of France is"}, headers={"Authorization": f"Bearer {KEY}"}).json()["tokens"]
r2 = client.completions.create(model=MODEL, prompt=ids, max_tokens=8, temperature=0)
check("completions with token ids", r2.choices[0].text == r.choices[0].text, f"{r2.choices[0].text!r}")
d = HTTP.post(BASE + "/detokenize", json={"tokens": ids}, headers={"Authorization": f"Bearer {KEY}"}).json()
check("detokenize(tokenize(x)) == x", d["content"] == "The capital of France is", f"{d}")
r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3, temperature=0, logprobs=2)
check("legacy logprobs", len(r.choices[0].logprobs.token_logprobs) == 3 and len(r.choices[0].logprobs.top_logprobs[0]) == 2, f"{r.choices[0].logprobs}")

# Prefix cache: the same long system prompt twice reuses its KV.
system = {"role": "system", "content": "You are a helpful assistant. " * 30}
client.chat.completions.create(model=MODEL, messages=[system, {"role": "user", "content": "Hi"}], max_tokens=2, temperature=0)
r = client.chat.completions.create(model=MODEL, messages=[system, {"role": "user", "content": "Hello there"}], max_tokens=2, temperature=0)
cached = r.usage.prompt_tokens_details.cached_tokens
check("prefix cache reuses the shared system prompt", cached >= 150, f"cached {cached} of {r.usage.prompt_tokens}")


def copied_total():
    m = HTTP.get(BASE + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    return int(next(l.split()[1] for l in m.splitlines() if l.startswith("oxibonsai_prompt_tokens_copied_total ")))


# Prefix cache across slots: while one request holds its slot (end tokens banned, so it keeps
# generating), another with the same long system prompt goes to another slot and copies the
# prefix's keys and values from the busy one instead of computing them.
system2 = {"role": "system", "content": "Answer in one short sentence about the weather. " * 20}
ends = HTTP.post(BASE + "/tokenize", json={"content": "<|im_end|><|endoftext|>", "parse_special": True},
                 headers={"Authorization": f"Bearer {KEY}"}).json()["tokens"]
copied_before = copied_total()
holder = client.chat.completions.create(
    model=MODEL, messages=[system2, {"role": "user", "content": "Hi"}], max_tokens=400, temperature=0,
    stream=True, logit_bias={str(t): -100 for t in ends})
chunks = iter(holder)
next(chunks)  # the role chunk, sent at once
next(chunks)  # a generated token's: the prompt (prefilled in chunks) is in its slot's cache now
r = client.chat.completions.create(model=MODEL, messages=[system2, {"role": "user", "content": "Hello there"}],
                                   max_tokens=2, temperature=0)
holder.close()
cached, copied = r.usage.prompt_tokens_details.cached_tokens, copied_total() - copied_before
check("prefix cache across slots: a busy slot's system prompt is copied", cached >= 150 and copied >= 150,
      f"cached {cached}, copied {copied} of {r.usage.prompt_tokens}")

# Errors.
two = client.chat.completions.create(model=MODEL, messages=USER, n=2, max_tokens=3, temperature=0)
check("n = 2: two choices, indexed", [c.index for c in two.choices] == [0, 1] and two.choices[0].message.content == two.choices[1].message.content
      and two.usage.completion_tokens == 6, f"{two}")
expect_error("n above the limit", lambda: client.chat.completions.create(model=MODEL, messages=USER, n=17), 400, param="n")
expect_error("n > 1 streamed", lambda: client.chat.completions.create(model=MODEL, messages=USER, n=2, stream=True), 400, param="n")
expect_error("tool_choice naming no declared tool", lambda: client.chat.completions.create(
    model=MODEL, messages=USER, tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    tool_choice={"type": "function", "function": {"name": "g"}}), 400, param="tool_choice")
expect_error("invalid json_schema", lambda: client.chat.completions.create(
    model=MODEL, messages=USER, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}}), 400, param="response_format")
expect_error("json_schema without a schema", lambda: client.chat.completions.create(
    model=MODEL, messages=USER, response_format={"type": "json_schema", "json_schema": {"name": "x"}}), 400, param="response_format.json_schema.schema")
expect_error("temperature out of range", lambda: client.chat.completions.create(model=MODEL, messages=USER, temperature=5), 400, param="temperature")
expect_error("empty messages", lambda: client.chat.completions.create(model=MODEL, messages=[]), 400, param="messages")
expect_error("bad role", lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "wizard", "content": "x"}]), 400, param="messages[0].role")
e = expect_error("context_length_exceeded", lambda: client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "word " * 3000}]), 400, code="context_length_exceeded")
check("context error gives the counts", "maximum context length is" in e.body["message"], f"{e.body}")
check("context error in llama-server's shape", e.body.get("type") == "exceed_context_size_error" and e.body.get("param") == "messages"
      and e.body.get("n_prompt_tokens", 0) > 3000 and e.body.get("n_ctx", 0) > 0, f"{e.body}")
e = expect_error("context_length_exceeded on /v1/completions", lambda: client.completions.create(
    model=MODEL, prompt="word " * 3000), 400, param="prompt", code="context_length_exceeded")
expect_error("wrong API key", lambda: openai.OpenAI(base_url=BASE + "/v1", api_key="wrong", max_retries=0).models.list(), 401)
r = HTTP.get(BASE + "/v1/models")
check("missing API key: 401", r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text)
check("/health needs no key", HTTP.get(BASE + "/health").status_code == 200)
r = HTTP.post(BASE + "/v1/chat/completions", content=b"{not json", headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
check("bad JSON: 400", r.status_code == 400 and r.json()["error"]["param"] == "body", r.text)
r = HTTP.post(BASE + "/v1/chat/completions", content=b"x" * (9 << 20), headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
check("oversized body: 413", r.status_code == 413 and "error" in r.json(), f"{r.status_code} {r.text[:200]}")
r = HTTP.get(BASE + "/v1/nothing-here", headers={"Authorization": f"Bearer {KEY}"})
check("unknown route: 404 in OpenAI shape", r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", r.text)

# Queue full: one slot, no queue. A long request holds the slot; the next is refused with 429.
small = openai.OpenAI(base_url=SMALL + "/v1", api_key="none", max_retries=0, timeout=300)
holder = small.chat.completions.create(model=MODEL, messages=USER, max_tokens=400, temperature=0, stream=True)
first = next(iter(holder))
r = HTTP.post(SMALL + "/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
check("queue full: 429", r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error", f"{r.status_code} {r.text}")
check("429 has retry-after", "retry-after" in r.headers, f"{r.headers}")
holder.close()
# The cancelled request frees its slot within a step: the next request is served.
for _ in range(100):
    r = HTTP.post(SMALL + "/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
    if r.status_code == 200:
        break
    time.sleep(0.05)
check("a cancelled stream frees its slot", r.status_code == 200, f"{r.status_code} {r.text}")

# Metrics.
m = HTTP.get(BASE + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
for name in ["oxibonsai_requests_total", "oxibonsai_prompt_tokens_total", "oxibonsai_completion_tokens_total",
             "oxibonsai_prompt_tokens_copied_total", "oxibonsai_queue_depth", "oxibonsai_active_slots", "oxibonsai_time_to_first_token_seconds_bucket",
             "oxibonsai_time_per_output_token_seconds_count"]:
    check(f"metric {name}", name in m)
print("all conformance checks passed")
