"""Tool calling and structured output of `oxibonsai serve`, through the official `openai` Python
package and LangChain (`bind_tools`, `with_structured_output`).

Usage: python tools_conformance.py BASE_URL LABEL thinks|plain
  BASE_URL  a running server (no API key); LABEL names it in the output; `thinks`: the model has
            Qwen3's <think> tags (reasoning must stream before the tool calls).
Every check prints one line; the first failure raises (exit code 1). The model may have random
weights: what is checked is what the constraint guarantees (valid calls to declared tools with
schema-valid arguments), the shapes of the API, and that streaming gives what non-streaming gives.
"""

import json
import sys
import time

import httpx
import jsonschema
import openai

BASE, LABEL, THINKS = sys.argv[1], sys.argv[2], sys.argv[3] == "thinks"
client = openai.OpenAI(base_url=BASE + "/v1", api_key="none", max_retries=0, timeout=600)


def check(name, condition, detail=""):
    if not condition:
        raise AssertionError(f"[{LABEL}] {name}: {detail}")
    print(f"ok  [{LABEL}] {name}")


for _ in range(600):
    try:
        if httpx.get(BASE + "/health", timeout=5).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    time.sleep(0.1)
MODEL = client.models.list().data[0].id

# Tool sets covering nested objects, arrays, enums, required and optional fields. Strings and
# arrays are bounded so that a random-weight model finishes a call within max_tokens.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
BOOKING = {"type": "function", "function": {
    "name": "book_table", "description": "Book a restaurant table.",
    "parameters": {"type": "object", "properties": {
        "guest": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10},
            "vip": {"type": "boolean"}}, "required": ["name", "vip"], "additionalProperties": False},
        "seats": {"type": "integer", "minimum": 1, "maximum": 12},
        "dishes": {"type": "array", "items": {"type": "string", "enum": ["soup", "fish", "cake"]},
                   "minItems": 1, "maxItems": 3}},
        "required": ["guest", "seats", "dishes"], "additionalProperties": False}}}
REFS = {"type": "function", "function": {
    "name": "plot_points", "description": "Plot points.",
    "parameters": {"type": "object", "$defs": {"Point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -9, "maximum": 9},
        "y": {"type": "integer", "minimum": -9, "maximum": 9}},
        "required": ["x", "y"], "additionalProperties": False}},
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/Point"},
                                  "minItems": 1, "maxItems": 2}},
        "required": ["points"], "additionalProperties": False}}}
NO_PARAMS = {"type": "function", "function": {"name": "get_time"}}
TOOLSETS = [[WEATHER], [WEATHER, BOOKING], [BOOKING, REFS, NO_PARAMS]]
BY_NAME = {t["function"]["name"]: t for ts in TOOLSETS for t in ts}
USER = [{"role": "user", "content": "What is the weather in Paris? Book a table too."}]
# Qwen3's template: no reasoning block (a random model might never close one).
EXTRA = {"chat_template_kwargs": {"enable_thinking": False}}


def validate_call(name, call, allowed):
    fn = call.function
    check(f"{name}: id and type", call.id and call.type == "function", call)
    check(f"{name}: declared tool", fn.name in allowed, fn.name)
    args = json.loads(fn.arguments)
    schema = BY_NAME[fn.name]["function"].get("parameters", {"type": "object"})
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as e:
        raise AssertionError(f"[{LABEL}] {name}: arguments {args} not valid: {e.message}")
    check(f"{name}: arguments valid against {fn.name}'s schema", True)
    return fn.name, args


def streamed(**kw):
    """The stream's deltas accumulated as OpenAI documents it; also checks the delta shapes."""
    calls, content, reasoning, finish = {}, "", "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        d = choice.delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                check("stream: first delta of a call has id, type, name, empty arguments",
                      tc.id and tc.type == "function" and tc.function.name
                      and tc.function.arguments == "", tc)
                check("stream: call indexes count from 0", tc.index == len(calls), tc.index)
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                check_fragment = tc.id is None and (tc.function.name is None)
                if not check_fragment:
                    raise AssertionError(f"[{LABEL}] later deltas carry only arguments: {tc}")
                calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = choice.finish_reason or finish
    return [calls[i] for i in sorted(calls)], content, reasoning, finish


# --- tool_choice: required, on several tool sets and seeds ----------------------------------------
# One call per answer here (a random-weight model rarely chooses to stop calling); parallel calls
# are checked below.
for t, tools in enumerate(TOOLSETS):
    allowed = {x["function"]["name"] for x in tools}
    for seed in (1, 2):
        r = client.chat.completions.create(
            model=MODEL, messages=USER, tools=tools, tool_choice="required", seed=seed,
            temperature=1.0, max_tokens=600, parallel_tool_calls=False, extra_body=EXTRA)
        c = r.choices[0]
        name = f"required, toolset {t}, seed {seed}"
        check(f"{name}: finish_reason tool_calls", c.finish_reason == "tool_calls", c)
        check(f"{name}: exactly one call", len(c.message.tool_calls or []) == 1, c.message)
        validate_call(name, c.message.tool_calls[0], allowed)

# Parallel calls allowed (the default): every call is valid, but for one the length limit cut.
for seed in (1, 2):
    r = client.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLSETS[1], tool_choice="required", seed=seed,
        max_tokens=300, extra_body=EXTRA)
    c = r.choices[0]
    calls = c.message.tool_calls or []
    complete = calls if c.finish_reason == "tool_calls" else calls[:-1]
    check(f"parallel, seed {seed}: finish reason", c.finish_reason in ("tool_calls", "length"), c)
    check(f"parallel, seed {seed}: at least one complete call", complete, c)
    for call in complete:
        validate_call(f"parallel, seed {seed}", call, {"get_weather", "book_table"})

# --- a named function: exactly one call, to it --------------------------------------------------
for target in ("book_table", "plot_points"):
    r = client.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLSETS[2], seed=3, max_tokens=600, extra_body=EXTRA,
        tool_choice={"type": "function", "function": {"name": target}})
    calls = r.choices[0].message.tool_calls
    check(f"named {target}: one call", calls and len(calls) == 1, r.choices[0].message)
    check(f"named {target}: to it", calls[0].function.name == target, calls[0])
    validate_call(f"named {target}", calls[0], {target})

# --- parallel_tool_calls: false → exactly one call ------------------------------------------------
for seed in (4, 5):
    r = client.chat.completions.create(
        model=MODEL, messages=USER, tools=TOOLSETS[1], tool_choice="required", seed=seed,
        parallel_tool_calls=False, max_tokens=600, extra_body=EXTRA)
    check(f"parallel_tool_calls false, seed {seed}: one call",
          len(r.choices[0].message.tool_calls or []) == 1, r.choices[0].message)

# --- streamed == non-streamed (greedy) -----------------------------------------------------------
for t, tools in enumerate(TOOLSETS):
    kw = dict(model=MODEL, messages=USER, tools=tools, tool_choice="required", temperature=0,
              max_tokens=600, extra_body=EXTRA)
    whole = client.chat.completions.create(**kw).choices[0]
    calls, content, _, finish = streamed(**kw)
    want = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    got = [(c["name"], c["arguments"]) for c in calls]
    check(f"stream == non-stream, toolset {t}: same calls", got == want, f"{got} vs {want}")
    check(f"stream == non-stream, toolset {t}: same finish", finish == whole.finish_reason,
          f"{finish} vs {whole.finish_reason}")
    check(f"stream == non-stream, toolset {t}: same content",
          (content or None) == (whole.message.content or None), f"{content!r} vs {whole.message.content!r}")
    for c in calls:
        check(f"stream, toolset {t}: call ids look like OpenAI's", c["id"].startswith("call_"), c["id"])

# --- reasoning streams before the tool calls (thinking left on) ---------------------------------
if THINKS:
    think_ids = [httpx.post(BASE + "/tokenize", json={"content": t, "parse_special": True}).json()["tokens"]
                 for t in ("<think>", "</think>")]
    check("thinks: <think> and </think> are single tokens", all(len(t) == 1 for t in think_ids), think_ids)
    # A nudge towards opening and closing a block (a random model would rarely do either).
    bias = {str(t[0]): 8 for t in think_ids}
    thought = 0
    for seed in range(4):
        order, calls = "", {}
        for chunk in client.chat.completions.create(
                model=MODEL, messages=USER, tools=[WEATHER], tool_choice="required", stream=True,
                parallel_tool_calls=False, seed=seed, max_tokens=600, logit_bias=bias):
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            if getattr(d, "reasoning_content", None):
                order += "R"
            for tc in d.tool_calls or []:
                order += "T"
                calls.setdefault(tc.index, [tc.function.name, ""])[1] += tc.function.arguments or ""
            if d.content:
                order += "C"
        check(f"thinks, seed {seed}: reasoning before any tool call, no content",
              "C" not in order and "R" not in order.lstrip("R"), order)
        check(f"thinks, seed {seed}: one valid call", len(calls) == 1 and calls[0][0] == "get_weather"
              and jsonschema.validate(json.loads(calls[0][1]), WEATHER["function"]["parameters"]) is None, calls)
        thought += order.startswith("R")
    check("thinks: some answers reasoned first", thought > 0, thought)

# --- two steps: the call, then its result fed back ------------------------------------------------
first = client.chat.completions.create(
    model=MODEL, messages=USER, tools=[WEATHER], tool_choice="required", seed=7, max_tokens=600,
    extra_body=EXTRA)
msg = first.choices[0].message
result = "Sunny, 21 degrees, light wind from the west."
history = USER + [
    {"role": "assistant", "content": msg.content,
     "tool_calls": [tc.model_dump() for tc in msg.tool_calls]},
    *({"role": "tool", "tool_call_id": tc.id, "content": result} for tc in msg.tool_calls),
]
second = client.chat.completions.create(
    model=MODEL, messages=history, tools=[WEATHER], seed=7, max_tokens=40, extra_body=EXTRA)
check("two steps: second answer", second.choices[0].finish_reason in ("stop", "length", "tool_calls"),
      second.choices[0])
n_result = len(httpx.post(BASE + "/tokenize", json={"content": result}).json()["tokens"])
grew = second.usage.prompt_tokens - first.usage.prompt_tokens
check("two steps: the call and its result are in the second prompt",
      grew >= n_result + len(msg.tool_calls[0].function.arguments) // 8,
      f"prompt grew by {grew} tokens; the result alone is {n_result}")
# The same history with the tool result changed gives a different prompt (the result is used).
history[-1]["content"] = "x"
third = client.chat.completions.create(
    model=MODEL, messages=history, tools=[WEATHER], tool_choice="none", seed=7, max_tokens=1,
    extra_body=EXTRA)
check("two steps: tool_choice none answers in text", not third.choices[0].message.tool_calls,
      third.choices[0].message)
check("two steps: the tool result's text reaches the prompt",
      second.usage.prompt_tokens - third.usage.prompt_tokens >= n_result - 2,
      f"{second.usage.prompt_tokens} vs {third.usage.prompt_tokens}")

# --- auto: text or valid calls; the shape is right either way ----------------------------------
for seed in (1, 2, 3):
    r = client.chat.completions.create(
        model=MODEL, messages=USER, tools=[WEATHER], seed=seed, max_tokens=120, extra_body=EXTRA)
    c = r.choices[0]
    if c.message.tool_calls and c.finish_reason == "tool_calls":
        check(f"auto, seed {seed}: answered with a call", True)
    else:
        check(f"auto, seed {seed}: answered in text", isinstance(c.message.content, str), c)

# --- structured output: every constraint field, on chat and text completions -------------------
import re  # noqa: E402

ANSWER = [{"role": "user", "content": "Give me a date, a choice and a list."}]
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                      "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
                                               "maxItems": 3}},
     "required": ["name", "tags"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
        "required": ["x", "ok"], "additionalProperties": False}},
     "required": ["point"], "additionalProperties": False},
]
for i, schema in enumerate(SCHEMAS):
    for field, value in (("json_schema", schema), ("guided_json", schema), ("guided_json", json.dumps(schema))):
        r = client.chat.completions.create(model=MODEL, messages=ANSWER, seed=i, max_tokens=400,
                                           extra_body={field: value, **EXTRA})
        c = r.choices[0]
        check(f"{field} schema {i}: finished", c.finish_reason == "stop", c)
        jsonschema.validate(json.loads(c.message.content), schema)
        check(f"{field} schema {i}: the answer validates", True)
DATE = r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
for seed in (1, 2):
    r = client.chat.completions.create(model=MODEL, messages=ANSWER, seed=seed, max_tokens=40,
                                       extra_body={"guided_regex": DATE, **EXTRA})
    check(f"guided_regex, seed {seed}: a date", re.fullmatch(DATE, r.choices[0].message.content),
          r.choices[0].message.content)
    r = client.completions.create(model=MODEL, prompt="Pick one:", seed=seed, max_tokens=20,
                                  extra_body={"guided_choice": ["red pill", "blue pill", "a+b (c)"]})
    check(f"guided_choice (completions), seed {seed}: one of the options",
          r.choices[0].text in ("red pill", "blue pill", "a+b (c)"), r.choices[0].text)
    gbnf = 'root ::= "[" num ("," num){0,3} "]"\nnum ::= [1-9] [0-9]{0,2}'
    for field, source in (("grammar", gbnf), ("guided_grammar", gbnf),
                          ("guided_grammar", 'start: "[" NUM ("," NUM)* "]"\nNUM: /[1-9][0-9]{0,2}/')):
        r = client.chat.completions.create(model=MODEL, messages=ANSWER, seed=seed, max_tokens=60,
                                           extra_body={field: source, **EXTRA})
        text = r.choices[0].message.content
        check(f"{field} ({'gbnf' if '::=' in source else 'lark'}), seed {seed}: in the language",
              re.fullmatch(r"\[[1-9][0-9]{0,2}(,[1-9][0-9]{0,2})*\]", text) and
              (text.count(",") <= 3 or "::=" not in source), text)
expect_two = None
try:
    client.chat.completions.create(model=MODEL, messages=ANSWER, max_tokens=4,
                                   response_format={"type": "json_object"}, extra_body={"guided_regex": "a"})
except openai.BadRequestError as e:
    expect_two = e.body
check("two constraints: 400 naming the second", expect_two and expect_two.get("param") == "guided_regex", expect_two)
for field, value in (("guided_regex", "(unclosed"), ("grammar", "root ::= nope"), ("guided_choice", []),
                     ("json_schema", {"type": "strnig"})):
    try:
        client.chat.completions.create(model=MODEL, messages=ANSWER, max_tokens=4, extra_body={field: value})
        raise AssertionError(f"[{LABEL}] bad {field}: accepted")
    except openai.BadRequestError as e:
        check(f"bad {field}: 400 naming it", e.body.get("param") == field, e.body)

# --- errors --------------------------------------------------------------------------------------
def expect_400(name, param, **kw):
    try:
        client.chat.completions.create(**{"model": MODEL, "messages": USER, "max_tokens": 4, **kw})
    except openai.BadRequestError as e:
        check(f"{name}: 400 naming {param}", e.body.get("param") == param, e.body)
        return
    raise AssertionError(f"[{LABEL}] {name}: no error")


expect_400("unknown named tool", "tool_choice", tools=[WEATHER],
           tool_choice={"type": "function", "function": {"name": "nope"}})
expect_400("required without tools", "tool_choice", tools=[], tool_choice="required")
expect_400("non-function tool", "tools[0].type", tools=[{"type": "retrieval"}])
expect_400("bad tool name", "tools[0].function.name",
           tools=[{"type": "function", "function": {"name": "has space"}}])
expect_400("duplicate tool", "tools[1].function.name", tools=[WEATHER, WEATHER])
expect_400("legacy functions", "functions", functions=[{"name": "f"}])
expect_400("response_format with tools", "response_format", tools=[WEATHER],
           response_format={"type": "json_object"})
expect_400("bad arguments in history", "messages[1].tool_calls[0].function.arguments", messages=[
    USER[0], {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_weather", "arguments": "{not json"}}]}])

# --- LangChain ------------------------------------------------------------------------------------
from langchain_core.messages import HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402
from typing import Literal  # noqa: E402

llm = ChatOpenAI(base_url=BASE + "/v1", api_key="none", model=MODEL, temperature=0, max_retries=0,
                 max_tokens=600, timeout=600, extra_body=EXTRA)


class WeatherArgs(BaseModel):
    city: str = Field(max_length=10, description="the city")
    unit: Literal["celsius", "fahrenheit"]


@tool(args_schema=WeatherArgs)
def lookup_weather(city: str, unit: str) -> str:
    """Look up the weather of a city."""
    return f"Sunny in {city}"


bound = llm.bind_tools([lookup_weather], tool_choice="required", parallel_tool_calls=False)
ai = bound.invoke([HumanMessage("Weather in Oslo, in celsius?")])
check("langchain bind_tools: a tool call", ai.tool_calls, ai)
call = ai.tool_calls[0]
check("langchain bind_tools: to the bound tool", call["name"] == "lookup_weather", call)
lc_schema = convert_to_openai_tool(lookup_weather)["function"]["parameters"]
try:
    jsonschema.validate(call["args"], lc_schema)
except jsonschema.ValidationError as e:
    raise AssertionError(f"[{LABEL}] langchain bind_tools: {call['args']} not valid: {e.message}")
check("langchain bind_tools: arguments valid against the tool's schema",
      {"city", "unit"} <= set(call["args"]), call)
gathered = None
for piece in bound.stream([HumanMessage("Weather in Oslo, in celsius?")]):
    gathered = piece if gathered is None else gathered + piece
check("langchain bind_tools: streaming gives the same call",
      [(c["name"], c["args"]) for c in gathered.tool_calls] == [(c["name"], c["args"]) for c in ai.tool_calls],
      f"{gathered.tool_calls} vs {ai.tool_calls}")
reply = llm.bind_tools([lookup_weather]).invoke([HumanMessage("Weather in Oslo, in celsius?"), ai,
                         ToolMessage("Sunny, 18 degrees", tool_call_id=call["id"])])
check("langchain: a tool result fed back gives an answer",
      isinstance(reply.content, str) or reply.tool_calls, reply)


class Booking(BaseModel):
    """A table booking."""
    name: str = Field(max_length=10)
    seats: int = Field(ge=1, le=12)
    dish: Literal["soup", "fish", "cake"]


for method in ("json_schema", "function_calling"):
    for seed in (1, 2):
        sampled = ChatOpenAI(base_url=BASE + "/v1", api_key="none", model=MODEL, temperature=1,
                             seed=seed, max_retries=0, max_tokens=600, timeout=600, extra_body=EXTRA)
        b = sampled.with_structured_output(Booking, method=method).invoke(
            "Book a table for Ann, 2 seats, fish.")
        check(f"langchain with_structured_output ({method}, seed {seed}): a valid Booking",
              isinstance(b, Booking) and 1 <= b.seats <= 12 and len(b.name) <= 10, b)

print(f"[{LABEL}] all tool checks passed")
