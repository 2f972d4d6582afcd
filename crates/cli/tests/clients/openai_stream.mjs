// Streaming through the npm `openai` package, as a Node application would use it.
//
// Usage: node openai_stream.mjs BASE_URL API_KEY REQUEST_JSON
//   REQUEST_JSON  {"chat": {...create params...}, "completion": {...create params...}}
// Prints one JSON line: for each request the text joined from the stream, the number of chunks
// that carried text, the finish_reason, and the usage of the include_usage chunk. The caller
// compares the text with the server's non-stream answer.
// The package is resolved from OXIBONSAI_TEST_NODE_MODULES (ES modules ignore NODE_PATH).
import { createRequire } from "node:module";

const modules = process.env.OXIBONSAI_TEST_NODE_MODULES;
if (!modules) throw new Error("OXIBONSAI_TEST_NODE_MODULES is not set");
const require = createRequire(modules.replace(/\/?$/, "/"));
const { OpenAI } = require("openai");

const [base, apiKey, requestJson] = process.argv.slice(2);
const request = JSON.parse(requestJson);
const client = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0, timeout: 300_000 });

async function drain(stream, textOf) {
  let text = "", chunks = 0, finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      const piece = textOf(choice);
      if (piece) { text += piece; chunks += 1; }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  return { text, chunks, finish, usage };
}

const streamOptions = { stream: true, stream_options: { include_usage: true } };
const chat = await drain(
  await client.chat.completions.create({ ...request.chat, ...streamOptions }),
  (c) => c.delta?.content ?? "",
);
const completion = await drain(
  await client.completions.create({ ...request.completion, ...streamOptions }),
  (c) => c.text ?? "",
);

// A client that gives up mid-stream: the SDK's abort must end the request without an error
// other than the abort itself. The request asks for a long answer (a count, 64 tokens), so the
// server cannot have sent all of it before the client reads its second chunk: an answer that
// ended first would reach the client whole, leaving nothing to abort (SmolLM2 answers the
// colours question in 16 tokens, faster than a loaded host schedules the client).
const controller = new AbortController();
const abandoned = await client.chat.completions.create(
  {
    ...request.chat,
    ...streamOptions,
    messages: [{ role: "user", content: "Count from 1 to 200, one number a line." }],
    max_tokens: 64,
  },
  { signal: controller.signal },
);
let seen = 0, aborted = false;
try {
  for await (const chunk of abandoned) {
    if (chunk.choices.some((c) => c.delta?.content)) seen += 1;
    if (seen === 2) {
      // Leave the loop too: a read already in flight when the abort lands may never settle
      // (node then exits 13 on the unsettled await), and the request is over either way.
      controller.abort();
      aborted = true;
      break;
    }
  }
} catch (e) {
  aborted = e.name === "APIUserAbortError" || e.name === "AbortError";
  if (!aborted) throw e;
}

console.log(JSON.stringify({ chat, completion, abort: { seen, aborted } }));
