"""OpenAI's Responses API and Anthropic's Messages API of `oxibonsai serve`, through the official
`openai` and `anthropic` Python packages, unchanged.

Usage: python compat_clients.py BASE_URL API_KEY
  BASE_URL  a running server with SmolLM2 and `--parallel 1`, started with `--api-key API_KEY`
            (the openai client sends it as a bearer token, the anthropic client as `x-api-key`).
Every check prints one line; the first failure raises (exit code 1). Answers are greedy: each
API's answer is compared with the chat completion of the same conversation (the same engine job
reached through the OpenAI chat route), and each stream with the whole answer.
"""

import json
import sys
import time

import anthropic
import httpx
import jsonschema
import openai

BASE, KEY = sys.argv[1], sys.argv[2]
oai = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=600)
claude = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=600)


def check(name, condition, detail=""):
    if not condition:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok  {name}")


for _ in range(600):
    try:
        if httpx.get(BASE + "/health", timeout=5).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    time.sleep(0.1)
MODEL = oai.models.list().data[0].id

SYSTEM = "You are a helpful assistant who answers briefly."
QUESTION = "Name three colors of the rainbow."
WEATHER_SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}


def chat(messages, max_tokens, **extra):
    # Asked twice: the first leaves the prompt in the (single) slot, so the compared answers all
    # reuse it and compute the same way (the engine is not batch-invariant, like llama.cpp).
    for _ in range(2):
        r = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                        temperature=0, **extra)
    return r


def warm(call, **request):
    """The answer to the second of two same requests (see `chat`)."""
    call(**request)
    return call(**request)


# ---------------------------------------------------------------- OpenAI Responses API
ref = chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}], 40)
ref_text = ref.choices[0].message.content
check("responses: the chat reference answered", bool(ref_text), ref)

resp = warm(oai.responses.create, model=MODEL, instructions=SYSTEM, input=QUESTION,
                            max_output_tokens=40, temperature=0)
check("responses: id and item ids", resp.id.startswith("resp_") and resp.output[0].id.startswith("msg_"),
      resp)
check("responses: the answer is the chat completion's (instructions = system message)",
      resp.output_text == ref_text, f"{resp.output_text!r} vs {ref_text!r}")
want_status = "incomplete" if ref.choices[0].finish_reason == "length" else "completed"
check("responses: status follows the finish reason", resp.status == want_status,
      f"{resp.status} vs chat {ref.choices[0].finish_reason}")
check("responses: usage is the chat's",
      (resp.usage.input_tokens, resp.usage.output_tokens)
      == (ref.usage.prompt_tokens, ref.usage.completion_tokens), f"{resp.usage} vs {ref.usage}")

# The same request as input items (a developer message and a user message with parts).
items = warm(oai.responses.create, model=MODEL, max_output_tokens=40, temperature=0, input=[
    {"role": "developer", "content": SYSTEM},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
check("responses: input items give the same answer", items.output_text == ref_text,
      f"{items.output_text!r}")

# Streaming: the events OpenAI sends, in order, adding up to the whole answer.
events = list(oai.responses.create(model=MODEL, instructions=SYSTEM, input=QUESTION,
                                   max_output_tokens=40, temperature=0, stream=True))
kinds = [e.type for e in events]
check("responses stream: created, in_progress first; completed last",
      kinds[:2] == ["response.created", "response.in_progress"]
      and kinds[-1] in ("response.completed", "response.incomplete"), kinds)
check("responses stream: sequence numbers count up",
      [e.sequence_number for e in events] == list(range(len(events))))
for kind in ["response.output_item.added", "response.content_part.added",
             "response.output_text.delta", "response.output_text.done",
             "response.content_part.done", "response.output_item.done"]:
    check(f"responses stream: has {kind}", kind in kinds, kinds)
msg_id = next(e.item.id for e in events if e.type == "response.output_item.added")
check("responses stream: every text event names the message item",
      all(e.item_id == msg_id for e in events if e.type.startswith(("response.output_text",
                                                                    "response.content_part"))))
streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
final = events[-1].response
check("responses stream: deltas = the final response's text = the whole answer",
      streamed == final.output_text == ref_text, f"{streamed!r} / {final.output_text!r}")
check("responses stream: the final response has usage", final.usage.output_tokens > 0)

# The stream helper of the SDK assembles the same.
with oai.responses.stream(model=MODEL, instructions=SYSTEM, input=QUESTION,
                          max_output_tokens=40, temperature=0) as s:
    helper_text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
    helper_final = s.get_final_response()
check("responses stream helper: same text", helper_text == helper_final.output_text == ref_text,
      f"{helper_text!r}")

# max_output_tokens cuts the answer: incomplete, with the reason.
short = oai.responses.create(model=MODEL, input=QUESTION, max_output_tokens=3, temperature=0)
check("responses: max_output_tokens makes the answer incomplete",
      short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens"
      and short.usage.output_tokens == 3, short)

# text.format json_schema: the answer is held to the schema.
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"], "additionalProperties": False}
structured = oai.responses.create(model=MODEL, input="Which city is the capital of France?",
                                  max_output_tokens=40, temperature=0,
                                  text={"format": {"type": "json_schema", "name": "city",
                                                   "schema": CITY, "strict": True}})
jsonschema.validate(json.loads(structured.output_text), CITY)
check("responses: text.format json_schema answers valid JSON", True)

# A function tool round trip: a forced call, its output, the answer.
TOOL = {"type": "function", "name": "get_weather", "description": "Current weather for a city.",
        "parameters": WEATHER_SCHEMA}
ASK = "What is the weather in Paris?"
called = warm(oai.responses.create, model=MODEL, input=ASK, tools=[TOOL], tool_choice="required",
                              max_output_tokens=60, temperature=0)
calls = [o for o in called.output if o.type == "function_call"]
check("responses tools: a forced call to the declared function",
      len(calls) >= 1 and calls[0].name == "get_weather" and calls[0].id.startswith("fc_")
      and calls[0].call_id, called.output)
jsonschema.validate(json.loads(calls[0].arguments), WEATHER_SCHEMA)
check("responses tools: the arguments validate against the schema", True)

stream_call = list(oai.responses.create(model=MODEL, input=ASK, tools=[TOOL],
                                        tool_choice="required", max_output_tokens=60,
                                        temperature=0, stream=True))
args = "".join(e.delta for e in stream_call if e.type == "response.function_call_arguments.delta")
done = [e for e in stream_call if e.type == "response.function_call_arguments.done"]
check("responses tools stream: argument deltas = done = the whole answer's call",
      args == done[0].arguments == calls[0].arguments, f"{args!r}")

RESULT = json.dumps({"temperature": 18, "unit": "celsius"})
output = {"type": "function_call_output", "call_id": calls[0].call_id, "output": RESULT}
# tool_choice none: the answer is text (a random turn of the small model could call again).
def after_call(**request):
    # Asked twice, as `chat` does: the compared answers reuse the prompt in the slot alike.
    for _ in range(2):
        r = oai.responses.create(model=MODEL, tools=[TOOL], tool_choice="none",
                                 max_output_tokens=30, temperature=0, **request)
    return r


after = after_call(previous_response_id=called.id, input=[output])
check("responses tools: the answer after the result is text",
      after.output_text and after.previous_response_id == called.id, after.output)
# The same conversation written out in full gives the same prompt and answer: the stored one
# is the same.
explicit = after_call(input=[{"role": "user", "content": ASK}, *called.output, output])
check("responses tools: previous_response_id = the conversation written out",
      explicit.usage.input_tokens == after.usage.input_tokens
      and explicit.output_text == after.output_text,
      f"{explicit.usage.input_tokens} {explicit.output_text!r} vs {after.usage.input_tokens} "
      f"{after.output_text!r}")
# And as a chat completion.
# The answer's text besides the call (the small model may go on writing) is part of its turn.
called_text = "".join(c.text for o in called.output if o.type == "message" for c in o.content)
ref_after = chat([{"role": "user", "content": ASK},
                  {"role": "assistant", "content": called_text, "tool_calls": [{
                      "id": calls[0].call_id, "type": "function",
                      "function": {"name": "get_weather", "arguments": calls[0].arguments}}]},
                  {"role": "tool", "tool_call_id": calls[0].call_id, "content": RESULT}], 30,
                 tool_choice="none", tools=[{"type": "function", "function": {k: TOOL[k] for k in
                                                          ("name", "description", "parameters")}}])
check("responses tools: = the chat completion of the same turns",
      after.output_text == ref_after.choices[0].message.content,
      f"{after.output_text!r} vs {ref_after.choices[0].message.content!r}")

try:
    oai.responses.create(model=MODEL, previous_response_id="resp_unknown", input="hi",
                         max_output_tokens=4)
    raise AssertionError("an unknown previous_response_id was accepted")
except openai.NotFoundError as e:
    check("responses: an unknown previous_response_id is a 404 naming it",
          e.body.get("param") == "previous_response_id", e.body)
unstored = oai.responses.create(model=MODEL, input="hi", max_output_tokens=2, store=False)
try:
    oai.responses.create(model=MODEL, previous_response_id=unstored.id, input="hi",
                         max_output_tokens=2)
    raise AssertionError("a response with store=false was kept")
except openai.NotFoundError:
    check("responses: store=false keeps nothing", True)

# ---------------------------------------------------------------- Anthropic Messages API
# This version of the client has no `temperature` argument: it goes in the body as sent.
GREEDY = {"temperature": 0}

message = warm(claude.messages.create, model=MODEL, max_tokens=40, extra_body=GREEDY, system=SYSTEM,
                                 messages=[{"role": "user", "content": QUESTION}])
text = "".join(b.text for b in message.content if b.type == "text")
check("messages: the answer is the chat completion's", text == ref_text, f"{text!r}")
want = "max_tokens" if ref.choices[0].finish_reason == "length" else "end_turn"
check("messages: stop_reason follows the finish reason", message.stop_reason == want,
      message.stop_reason)
check("messages: usage is the chat's",
      message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
      == ref.usage.prompt_tokens and message.usage.output_tokens == ref.usage.completion_tokens,
      message.usage)
blocks = warm(claude.messages.create, model=MODEL, max_tokens=40, extra_body=GREEDY,
                                system=[{"type": "text", "text": SYSTEM}],
                                messages=[{"role": "user", "content": [
                                    {"type": "text", "text": QUESTION}]}])
check("messages: system and content as blocks give the same answer",
      blocks.content[0].text == ref_text, blocks.content)
counted = claude.messages.count_tokens(model=MODEL, system=SYSTEM,
                                       messages=[{"role": "user", "content": QUESTION}])
check("messages: count_tokens = the chat's prompt tokens",
      counted.input_tokens == ref.usage.prompt_tokens, counted)

with claude.messages.stream(model=MODEL, max_tokens=40, extra_body=GREEDY, system=SYSTEM,
                            messages=[{"role": "user", "content": QUESTION}]) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
check("messages stream: text_stream = final message = the whole answer",
      streamed == final.content[0].text == ref_text, f"{streamed!r}")
check("messages stream: the final message's stop_reason and usage",
      final.stop_reason == message.stop_reason and final.usage.output_tokens
      == message.usage.output_tokens, final)
raw = list(claude.messages.create(model=MODEL, max_tokens=40, extra_body=GREEDY, system=SYSTEM,
                                  messages=[{"role": "user", "content": QUESTION}], stream=True))
order = [e.type for e in raw]
check("messages stream: the event order",
      order[0] == "message_start" and order[1] == "content_block_start"
      and order[-3:] == ["content_block_stop", "message_delta", "message_stop"]
      and set(order[2:-3]) == {"content_block_delta"}, order)

# stop_sequences: a word from the middle of the answer stops it there.
words = ref_text.split()
stop = words[len(words) // 2]
cut = warm(claude.messages.create, model=MODEL, max_tokens=40, extra_body=GREEDY, system=SYSTEM,
                             messages=[{"role": "user", "content": QUESTION}],
                             stop_sequences=["@@never@@", stop])
check("messages: a stop sequence ends the answer and is named",
      cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
      and cut.content[0].text == ref_text[:ref_text.index(stop)], cut)
with claude.messages.stream(model=MODEL, max_tokens=40, extra_body=GREEDY, system=SYSTEM,
                            messages=[{"role": "user", "content": QUESTION}],
                            stop_sequences=[stop]) as s:
    cut_stream = s.get_final_message()
check("messages stream: the stop sequence too",
      cut_stream.stop_reason == "stop_sequence" and cut_stream.stop_sequence == stop
      and cut_stream.content[0].text == cut.content[0].text, cut_stream)

# Tools: a forced call, streamed and whole alike, then the result and the answer.
CLAUDE_TOOL = {"name": "get_weather", "description": "Current weather for a city.",
               "input_schema": WEATHER_SCHEMA}
use = warm(claude.messages.create, model=MODEL, max_tokens=60, extra_body=GREEDY, tools=[CLAUDE_TOOL],
                             tool_choice={"type": "any"},
                             messages=[{"role": "user", "content": ASK}])
tool_uses = [b for b in use.content if b.type == "tool_use"]
check("messages tools: a forced tool_use of the declared tool",
      # max_tokens when the small model writes on after the call, as the chat's "length".
      use.stop_reason in ("tool_use", "max_tokens") and tool_uses and tool_uses[0].name == "get_weather"
      and tool_uses[0].id.startswith("toolu_"), use)
jsonschema.validate(tool_uses[0].input, WEATHER_SCHEMA)
check("messages tools: the input validates against the schema", True)
with claude.messages.stream(model=MODEL, max_tokens=60, extra_body=GREEDY, tools=[CLAUDE_TOOL],
                            tool_choice={"type": "any"},
                            messages=[{"role": "user", "content": ASK}]) as s:
    partial = "".join(e.delta.partial_json for e in s
                      if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
    use_stream = s.get_final_message()
check("messages tools stream: input_json_delta adds up to the whole answer's input",
      json.loads(partial) == tool_uses[0].input
      and [b.input for b in use_stream.content if b.type == "tool_use"] == [tool_uses[0].input],
      f"{partial!r}")
named = claude.messages.create(model=MODEL, max_tokens=60, extra_body=GREEDY, tools=[CLAUDE_TOOL],
                               tool_choice={"type": "tool", "name": "get_weather"},
                               messages=[{"role": "user", "content": ASK}])
check("messages tools: tool_choice names the tool",
      [b.name for b in named.content if b.type == "tool_use"] == ["get_weather"], named)
answer = warm(claude.messages.create, model=MODEL, max_tokens=30, extra_body=GREEDY, tools=[CLAUDE_TOOL],
                                tool_choice={"type": "none"},
                                messages=[{"role": "user", "content": ASK},
                                          {"role": "assistant", "content": use.content},
                                          {"role": "user", "content": [{
                                              "type": "tool_result", "tool_use_id": tool_uses[0].id,
                                              "content": RESULT}]}])
use_text = "".join(b.text for b in use.content if b.type == "text")
ref_answer = chat([{"role": "user", "content": ASK},
                   {"role": "assistant", "content": use_text, "tool_calls": [{
                       "id": tool_uses[0].id, "type": "function",
                       "function": {"name": "get_weather",
                                    "arguments": json.dumps(tool_uses[0].input)}}]},
                   {"role": "tool", "tool_call_id": tool_uses[0].id, "content": RESULT}], 30,
                  tool_choice="none", tools=[{"type": "function", "function": {
                      "name": "get_weather", "description": "Current weather for a city.",
                      "parameters": WEATHER_SCHEMA}}])
check("messages tools: the answer after tool_result = the chat completion of the same turns",
      answer.content and answer.content[0].text == ref_answer.choices[0].message.content,
      f"{answer.content} vs {ref_answer.choices[0].message.content!r}")

# Errors in Anthropic's shape, through the client's exception classes.
try:
    claude.messages.create(model=MODEL, max_tokens=10, messages=[
        {"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]}])
    raise AssertionError("a tool_use block in a user message was accepted")
except anthropic.BadRequestError as e:
    check("messages: a wrong block type is invalid_request_error naming it",
          e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error"
          and "messages[0].content[0].type" in e.body["error"]["message"], e.body)
try:
    anthropic.Anthropic(base_url=BASE, api_key="wrong", max_retries=0).messages.create(
        model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    raise AssertionError("a wrong x-api-key was accepted")
except anthropic.AuthenticationError:
    check("messages: a wrong x-api-key is refused", True)

print("all compat checks passed")
