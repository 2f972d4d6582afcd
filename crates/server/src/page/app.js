// The chat page of `oxibonsai serve`: conversations kept in this browser (localStorage), answers
// streamed from /v1/chat/completions (OpenAI's SSE) and shown as markdown.
//
// Safety: model text is untrusted. Markdown is rendered with raw HTML turned into text (marked's
// `html` renderer escapes it), the result is sanitized by DOMPurify, and the server's
// Content-Security-Policy allows no inline script; user text is only ever set as text.
import { marked } from "/assets/vendor/marked-18.2.1/marked.esm.js";
import hljs from "/assets/vendor/highlight-11.12.0/core.min.js";
import bash from "/assets/vendor/highlight-11.12.0/bash.min.js";
import c from "/assets/vendor/highlight-11.12.0/c.min.js";
import cpp from "/assets/vendor/highlight-11.12.0/cpp.min.js";
import css from "/assets/vendor/highlight-11.12.0/css.min.js";
import diff from "/assets/vendor/highlight-11.12.0/diff.min.js";
import go from "/assets/vendor/highlight-11.12.0/go.min.js";
import java from "/assets/vendor/highlight-11.12.0/java.min.js";
import javascript from "/assets/vendor/highlight-11.12.0/javascript.min.js";
import json from "/assets/vendor/highlight-11.12.0/json.min.js";
import markdown from "/assets/vendor/highlight-11.12.0/markdown.min.js";
import python from "/assets/vendor/highlight-11.12.0/python.min.js";
import rust from "/assets/vendor/highlight-11.12.0/rust.min.js";
import sql from "/assets/vendor/highlight-11.12.0/sql.min.js";
import typescript from "/assets/vendor/highlight-11.12.0/typescript.min.js";
import xml from "/assets/vendor/highlight-11.12.0/xml.min.js";
import yaml from "/assets/vendor/highlight-11.12.0/yaml.min.js";

const LANGUAGES = { bash, c, cpp, css, diff, go, java, javascript, json, markdown, python, rust, sql, typescript, xml, yaml };
for (const [name, grammar] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, grammar);
hljs.configure({ ignoreUnescapedHTML: true });

const purify = window.DOMPurify;
purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
});
const escapeHtml = (s) => s.replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]);
marked.use({ gfm: true, renderer: { html: (token) => escapeHtml(token.text) } });

const $ = (id) => document.getElementById(id);
const el = (tag, className, text) => {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
};

// ---- storage ----------------------------------------------------------------------------------
const KEY = { index: "oxibonsai.chats", chat: (id) => "oxibonsai.chat." + id, current: "oxibonsai.current", settings: "oxibonsai.settings" };
const DEFAULTS = { system: "", temperature: "", top_p: "", top_k: "", min_p: "", max_tokens: "", repeat_penalty: "", seed: "", tools: "", extra: "", theme: "auto" };
const read = (key, fallback) => { try { return JSON.parse(localStorage.getItem(key)) ?? fallback; } catch { return fallback; } };
function write(key, value) {
  try { localStorage.setItem(key, JSON.stringify(value)); return true; } catch (e) { notice("Could not save in this browser: " + e.message); return false; }
}
let settings = { ...DEFAULTS, ...read(KEY.settings, {}) };
let index = read(KEY.index, []); // [{id, title, updated}], newest first
let chat = null; // the open conversation: {id, title, updated, messages}; null: a new one, unsaved

function saveChat() {
  if (!chat) return;
  chat.updated = Date.now();
  write(KEY.chat(chat.id), chat);
  index = [{ id: chat.id, title: chat.title, updated: chat.updated }, ...index.filter((c) => c.id !== chat.id)];
  write(KEY.index, index);
  localStorage.setItem(KEY.current, chat.id);
  renderSidebar();
}
function openChat(id) {
  if (busy) return notice("Stop the answer first (Escape).");
  notice("");
  chat = id ? read(KEY.chat(id), null) : null;
  if (chat) localStorage.setItem(KEY.current, chat.id); else localStorage.removeItem(KEY.current);
  renderAll();
  $("app").classList.remove("open");
}
function deleteChat(id) {
  if (busy && chat?.id === id) return;
  localStorage.removeItem(KEY.chat(id));
  index = index.filter((c) => c.id !== id);
  write(KEY.index, index);
  if (chat?.id === id) openChat(null); else renderSidebar();
}
function renameChat(id, title) {
  const stored = read(KEY.chat(id), null);
  if (!stored || !title.trim()) return renderSidebar();
  stored.title = title.trim();
  write(KEY.chat(id), stored);
  if (chat?.id === id) chat.title = stored.title;
  index = index.map((c) => (c.id === id ? { ...c, title: stored.title } : c));
  write(KEY.index, index);
  // Not the whole page: an answer may be streaming into the log.
  renderSidebar();
  if (chat?.id === id) $("title").textContent = chat.title;
}

// ---- rendering ----------------------------------------------------------------------------------
function notice(text) { $("notice").textContent = text; }

/// Reasoning and answer of an assistant text: a leading <think>…</think> (open while it streams),
/// or a bare </think> when the chat template opened the block in the prompt.
function splitThink(text) {
  const open = text.match(/^\s*<think>/);
  const close = text.indexOf("</think>");
  if (open) {
    const start = open[0].length;
    if (close < 0) return { thinking: text.slice(start), answer: "", open: true };
    return { thinking: text.slice(start, close), answer: text.slice(close + 8).replace(/^\s+/, ""), open: false };
  }
  if (close >= 0) return { thinking: text.slice(0, close), answer: text.slice(close + 8).replace(/^\s+/, ""), open: false };
  return { thinking: "", answer: text, open: false };
}

function renderMarkdown(target, text) {
  const fragment = purify.sanitize(marked.parse(text), {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  });
  for (const code of fragment.querySelectorAll("pre > code")) {
    const lang = [...code.classList].find((k) => k.startsWith("language-"))?.slice(9);
    if (!lang || hljs.getLanguage(lang)) hljs.highlightElement(code);
    const copy = el("button", "copy-code", "Copy");
    copy.type = "button";
    copy.addEventListener("click", () => copyText(code.textContent, copy));
    code.parentElement.append(copy);
  }
  target.replaceChildren(fragment);
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = el("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  const label = button.textContent;
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = label), 1200);
}

function statsText(s) {
  if (!s || !s.tokens) return "";
  return s.rate ? `${s.tokens} tokens, ${s.rate.toFixed(1)} tokens/s` : `${s.tokens} tokens`;
}

/// One message's box; `fill` redraws its content (called on every streamed piece).
function messageBox(message, at) {
  const box = el("div", "msg " + message.role);
  box.dataset.index = at;
  const body = el("div", "body");
  if (message.role === "user") {
    body.textContent = message.content;
    box.append(body);
  } else {
    const think = el("details", "think");
    think.append(el("summary", "", "Thinking"), el("div", "think-body"));
    const tools = el("div", "tools");
    box.append(think, body, tools);
    box.fill = () => {
      const { thinking, answer, open } = splitThink(message.content || "");
      const reasoning = (message.reasoning || "") + thinking;
      think.hidden = !reasoning;
      think.querySelector("summary").textContent = open || (busy && !message.content) ? "Thinking…" : "Thought";
      think.querySelector(".think-body").textContent = reasoning;
      renderMarkdown(body, answer);
      tools.replaceChildren(...(message.tool_calls || []).map((call) => {
        const d = el("details", "tool-call");
        d.open = true;
        d.append(el("summary", "", `tool call: ${call.function?.name ?? "?"}`), el("pre", "", prettyArgs(call.function?.arguments)));
        return d;
      }));
      box.querySelector(".error")?.remove();
      if (message.error) box.insertBefore(el("div", "error", "Error: " + message.error), box.querySelector(".meta"));
      box.querySelector(".msg-stats").textContent = [statsText(message.stats), message.stopped ? "stopped" : "",
        message.finish === "length" ? "cut at max tokens" : ""].filter(Boolean).join(" · ");
    };
  }
  const meta = el("div", "meta");
  const actions = el("span", "actions");
  meta.append(el("span", "msg-stats"), actions);
  box.append(meta);
  const action = (name, label, run) => {
    const b = el("button", name, label);
    b.type = "button";
    b.addEventListener("click", run);
    actions.append(b);
  };
  action("copy", "Copy", (e) => copyText(message.role === "assistant" ? splitThink(message.content || "").answer : message.content, e.target));
  action("edit", "Edit", () => edit(box, message, at));
  if (message.role === "assistant" && at === chat.messages.length - 1) action("regenerate", "Regenerate", regenerate);
  box.fill?.();
  return box;
}

function prettyArgs(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch { return args ?? ""; }
}

function edit(box, message, at) {
  if (busy) return;
  const editor = el("textarea", "editor");
  editor.value = message.content || "";
  const save = el("button", "save", message.role === "user" ? "Save and send" : "Save");
  const cancel = el("button", "cancel", "Cancel");
  save.type = cancel.type = "button";
  const row = el("div", "meta");
  row.append(save, cancel);
  box.replaceChildren(editor, row);
  editor.focus();
  cancel.addEventListener("click", renderLog);
  save.addEventListener("click", () => {
    message.content = editor.value;
    if (message.role === "user") {
      chat.messages.length = at + 1;
      saveChat();
      renderLog();
      generate();
    } else {
      delete message.error;
      saveChat();
      renderLog();
    }
  });
}

function renderLog() {
  const log = $("log");
  log.replaceChildren(...(chat?.messages ?? []).map(messageBox));
  log.scrollTop = log.scrollHeight;
}

function renderSidebar() {
  const list = $("conversations");
  list.replaceChildren(...index.map(({ id, title }) => {
    const row = el("div", "conv" + (chat?.id === id ? " current" : ""));
    row.dataset.id = id;
    const open = el("button", "open", title);
    open.type = "button";
    open.title = title;
    open.addEventListener("click", () => openChat(id));
    const rename = el("button", "rename", "\u270e");
    rename.type = "button";
    rename.title = rename.ariaLabel = "Rename";
    rename.addEventListener("click", () => {
      const input = el("input");
      input.value = title;
      row.replaceChildren(input);
      input.focus();
      input.select();
      let done = false;
      const finish = (keep) => { if (done) return; done = true; keep ? renameChat(id, input.value) : renderSidebar(); };
      input.addEventListener("keydown", (e) => { if (e.key === "Enter") finish(true); if (e.key === "Escape") finish(false); });
      input.addEventListener("blur", () => finish(true));
    });
    const del = el("button", "delete", "\u2715");
    del.type = "button";
    del.title = del.ariaLabel = "Delete";
    del.addEventListener("click", () => {
      if (!del.classList.contains("armed")) { del.classList.add("armed"); del.textContent = "Sure?"; return; }
      deleteChat(id);
    });
    row.append(open, rename, del);
    return row;
  }));
}

function renderAll() {
  $("title").textContent = chat?.title ?? "New chat";
  document.title = (chat ? chat.title + " · " : "") + "OxiBonsai chat";
  renderSidebar();
  renderLog();
  const last = chat?.messages.findLast((m) => m.role === "assistant" && m.stats);
  $("stats").textContent = statsText(last?.stats);
  showContext(last?.stats);
}

function applyTheme() {
  if (settings.theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = settings.theme;
}

// ---- the server -----------------------------------------------------------------------------------
let apiKey = sessionStorage.getItem("oxibonsai-key") || "";
let nCtx = null;
let busy = null; // {controller}

function headers() {
  const h = { "Content-Type": "application/json" };
  if (apiKey) h.Authorization = "Bearer " + apiKey;
  return h;
}

async function loadModel() {
  for (;;) {
    try {
      const r = await fetch("/v1/models", { headers: headers() });
      if (r.status === 401) {
        apiKey = prompt("API key for this server:") || "";
        sessionStorage.setItem("oxibonsai-key", apiKey);
        continue;
      }
      if (r.ok) {
        const model = (await r.json()).data[0];
        $("model").textContent = model.id;
        nCtx = model.meta?.n_ctx ?? null;
        renderAll();
        return;
      }
    } catch { /* the server is starting or gone: try again */ }
    await new Promise((done) => setTimeout(done, 1000));
  }
}

function showContext(stats) {
  const used = stats ? (stats.prompt ?? 0) + (stats.tokens ?? 0) : 0;
  $("ctx").textContent = nCtx ? `context ${used} / ${nCtx}` : "";
  $("ctx").title = "tokens of the last exchange in this conversation / the context of a slot";
}

/// The request for the conversation so far: settings as the OpenAI fields, reasoning left out of
/// earlier answers (as the chat templates expect), then the extra fields as given.
function request() {
  const messages = [];
  if (settings.system.trim()) messages.push({ role: "system", content: settings.system });
  for (const m of chat.messages) {
    if (m.role === "user") { messages.push({ role: "user", content: m.content }); continue; }
    const out = { role: "assistant", content: splitThink(m.content || "").answer };
    if (m.tool_calls?.length) { out.tool_calls = m.tool_calls; if (!out.content) out.content = null; }
    messages.push(out);
  }
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  for (const key of ["temperature", "top_p", "min_p", "repeat_penalty"]) if (settings[key] !== "") body[key] = Number(settings[key]);
  for (const key of ["top_k", "max_tokens", "seed"]) if (settings[key] !== "") body[key] = Math.round(Number(settings[key]));
  if (settings.tools.trim()) body.tools = JSON.parse(settings.tools);
  if (settings.extra.trim()) Object.assign(body, JSON.parse(settings.extra));
  return body;
}

async function generate() {
  let body;
  try { body = JSON.stringify(request()); } catch (e) { notice("Settings: " + e.message); return; }
  const answer = { role: "assistant", content: "", reasoning: "" };
  chat.messages.push(answer);
  saveChat();
  busy = { controller: new AbortController() };
  $("send").textContent = "Stop";
  $("send").classList.add("stop");
  notice("");
  renderLog();
  const box = $("log").lastElementChild;
  let frame = 0;
  const redraw = () => {
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      const log = $("log");
      const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
      box.fill();
      if (atEnd) log.scrollTop = log.scrollHeight;
    });
  };
  const started = performance.now();
  let first = null, usage = null, timings = null;
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), signal: busy.controller.signal, body });
    if (!r.ok) { const j = await r.json().catch(() => ({})); throw new Error(j.error?.message || `${r.status} ${r.statusText}`); }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
        for (const line of event.split(/\r?\n/)) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          if (j.usage) usage = j.usage;
          if (j.timings) timings = j.timings;
          for (const choice of j.choices || []) {
            const d = choice.delta || {};
            if (first === null && (d.content || d.reasoning_content || d.tool_calls)) first = performance.now();
            if (d.reasoning_content) answer.reasoning += d.reasoning_content;
            if (d.content) answer.content += d.content;
            for (const call of d.tool_calls || []) {
              const calls = (answer.tool_calls ??= []);
              const slot = (calls[call.index ?? 0] ??= { id: "", type: "function", function: { name: "", arguments: "" } });
              if (call.id) slot.id = call.id;
              if (call.function?.name) slot.function.name += call.function.name;
              if (call.function?.arguments) slot.function.arguments += call.function.arguments;
            }
            if (choice.finish_reason) answer.finish = choice.finish_reason;
          }
          redraw();
        }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") answer.stopped = true;
    else answer.error = e.message;
  }
  cancelAnimationFrame(frame);
  const tokens = usage?.completion_tokens ?? 0;
  const seconds = (performance.now() - (first ?? started)) / 1000;
  // Tokens after the first over the time since it came: the prompt's processing is not in it.
  const rate = timings?.predicted_per_second ?? (tokens > 1 && seconds > 0 ? (tokens - 1) / seconds : null);
  if (tokens) answer.stats = { tokens, rate, prompt: usage.prompt_tokens };
  busy = null;
  $("send").textContent = "Send";
  $("send").classList.remove("stop");
  saveChat();
  renderLog();
  $("stats").textContent = statsText(answer.stats);
  showContext(answer.stats);
  $("log").lastElementChild.dataset.done = "1";
}

function send(text) {
  if (!chat) {
    chat = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title: text.slice(0, 48), messages: [] };
    $("title").textContent = chat.title;
  }
  chat.messages.push({ role: "user", content: text });
  generate();
}

function regenerate() {
  if (busy || chat?.messages.at(-1)?.role !== "assistant") return;
  chat.messages.pop();
  generate();
}

// ---- settings -------------------------------------------------------------------------------------
const form = $("settings-form");
function openSettings() {
  for (const [key, value] of Object.entries(settings)) if (form.elements[key]) form.elements[key].value = value;
  $("settings-error").textContent = "";
  $("settings").showModal();
}
form.addEventListener("submit", (e) => {
  e.preventDefault();
  const next = { ...settings };
  for (const key of Object.keys(DEFAULTS)) next[key] = form.elements[key].value;
  for (const [key, shape] of [["tools", Array], ["extra", Object]]) {
    if (!next[key].trim()) continue;
    let value;
    try { value = JSON.parse(next[key]); } catch (err) { $("settings-error").textContent = `${key}: ${err.message}`; return; }
    if (!(value instanceof shape) || (shape === Object && Array.isArray(value))) {
      $("settings-error").textContent = `${key}: must be a JSON ${shape === Array ? "list" : "object"}`;
      return;
    }
  }
  settings = next;
  write(KEY.settings, settings);
  applyTheme();
  $("settings").close();
});
$("cancel-settings").addEventListener("click", () => $("settings").close());

// ---- wiring -----------------------------------------------------------------------------------------
$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  if (busy) { busy.controller.abort(); return; }
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("form").requestSubmit(); }
});
document.addEventListener("keydown", (e) => { if (e.key === "Escape" && busy && !$("settings").open) busy.controller.abort(); });
$("new-chat").addEventListener("click", () => openChat(null));
$("open-settings").addEventListener("click", openSettings);
$("toggle-sidebar").addEventListener("click", () => {
  const narrow = matchMedia("(max-width: 760px)").matches;
  $("app").classList.toggle(narrow ? "open" : "collapsed");
});
$("scrim").addEventListener("click", () => $("app").classList.remove("open"));
$("theme").addEventListener("click", () => {
  const dark = settings.theme === "dark" || (settings.theme === "auto" && matchMedia("(prefers-color-scheme: dark)").matches);
  settings.theme = dark ? "light" : "dark";
  write(KEY.settings, settings);
  applyTheme();
});
window.addEventListener("storage", (e) => { if (e.key === KEY.index && !busy) { index = read(KEY.index, []); renderSidebar(); } });

applyTheme();
openChat(localStorage.getItem(KEY.current));
loadModel();
