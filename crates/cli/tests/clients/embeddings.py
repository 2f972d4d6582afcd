"""`/v1/embeddings` with the official `openai` Python package (float and base64 answers, every
input shape, usage, the errors) while a chat stream runs beside it.

Usage: python embeddings.py BASE_URL N_EMBD
Every check prints one line; the first failure raises (exit code 1).
"""

import base64
import math
import struct
import sys
import threading

import httpx
import openai

BASE, N_EMBD = sys.argv[1], int(sys.argv[2])
client = openai.OpenAI(base_url=BASE + "/v1", api_key="none", max_retries=0, timeout=300)
HTTP = httpx.Client(timeout=300)
MODEL = client.models.list().data[0].id


def check(name, condition, detail=""):
    if not condition:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok  {name}")


def expect_400(name, param, **kwargs):
    try:
        client.embeddings.create(model=MODEL, **kwargs)
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        check(f"{name}: 400 naming '{param}'", body.get("param") == param, f"{e.body}")
        return
    raise AssertionError(f"{name}: accepted")


# A chat stream runs while the embeddings are computed: both must finish.
stream_tokens = []


def chat():
    stream = client.chat.completions.create(
        model=MODEL, stream=True, max_tokens=48, temperature=0,
        messages=[{"role": "user", "content": "Count from one to twenty."}])
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            stream_tokens.append(chunk.choices[0].delta.content)


streamer = threading.Thread(target=chat)
streamer.start()

texts = ["The quick brown fox jumps over the lazy dog.", "Embeddings map text to vectors.", "A"]
floats = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
check("float: one embedding per input, in order",
      [d.index for d in floats.data] == [0, 1, 2] and all(d.object == "embedding" for d in floats.data))
check("float: the model's width", all(len(d.embedding) == N_EMBD for d in floats.data))
check("float: L2-normalized", all(abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-5
                                  for d in floats.data))
check("usage", floats.usage.prompt_tokens == floats.usage.total_tokens > 3, f"{floats.usage}")
check("object list", floats.object == "list" and floats.model == MODEL, f"{floats.model}")

# base64 asked for: the client hands the string over; little-endian f32, the float answer's values.
coded = client.embeddings.create(model=MODEL, input=texts, encoding_format="base64")
decoded = [struct.unpack(f"<{N_EMBD}f", base64.b64decode(d.embedding)) for d in coded.data]
worst = max(abs(a - b) for d, e in zip(floats.data, decoded) for a, b in zip(d.embedding, e))
check("base64: little-endian f32 of the float answer", worst < 1e-6, f"{worst}")
# Without encoding_format the client asks for base64 and decodes it itself.
default = client.embeddings.create(model=MODEL, input=texts[0])
check("the client's default (base64, decoded by the client)", len(default.data) == 1 and
      max(abs(a - b) for a, b in zip(default.data[0].embedding, floats.data[0].embedding)) < 1e-6)
raw = HTTP.post(BASE + "/v1/embeddings", json={"input": "A", "encoding_format": "base64"}).json()
check("base64 on the wire is a string", isinstance(raw["data"][0]["embedding"], str), f"{raw}")

# Token ids: the text's own tokens give the text's embedding.
ids = HTTP.post(BASE + "/tokenize", json={"content": texts[1], "add_special": True,
                                          "parse_special": True}).json()["tokens"]
by_ids = client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
check("token ids equal the text", max(abs(a - b) for a, b in
                                      zip(by_ids.data[0].embedding, floats.data[1].embedding)) < 1e-5)
lists = client.embeddings.create(model=MODEL, input=[ids, ids[:2]], encoding_format="float")
check("lists of token ids", len(lists.data) == 2 and lists.usage.prompt_tokens == len(ids) + 2)
same = client.embeddings.create(model=MODEL, input=texts[0], dimensions=N_EMBD, encoding_format="float")
check("dimensions equal to the model's", len(same.data[0].embedding) == N_EMBD)

expect_400("dimensions", "dimensions", input="x", dimensions=N_EMBD // 2)
expect_400("empty input list", "input", input=[])
expect_400("empty text", "input", input="")
expect_400("token id past the vocabulary", "input", input=[[1, 10 ** 9]])
expect_400("wrong type", "input", input=[{"a": 1}])
expect_400("encoding", "encoding_format", input="x", encoding_format="int8")
expect_400("longer than the context", "input", input=[list(range(5000))])

streamer.join()
check("the chat stream ran beside the embeddings", len(stream_tokens) > 0, f"{stream_tokens}")
print("all embedding checks passed")
