//! `POST /v1/chat/completions`: the messages rendered through the model's chat template, the
//! answer split into reasoning, content and tool calls ([`AnswerSplitter`]), whole or streamed.

use axum::response::{IntoResponse, Response};
use axum::Json;
use oxibonsai_engine::Grammar;
use oxibonsai_tokenizer::chat_template::{strftime_local, ChatRequest};
use oxibonsai_tokenizer::reasoning::ThinkSplitter;
use serde_json::{json, Map, Value};

use super::generate::{
    collect, finish_name, lossy, new_id, now_secs, sse, submit, system_fingerprint, usage_json,
    Chunks, Clock, Collected,
};
use super::{native, ModelRequest};
use crate::answer::{self, AnswerSplitter};
use crate::api::{self, Fields, Generation};
use crate::error::ApiError;
use crate::literal;
use crate::scheduler::{Finish, TokenLogprob, Usage};
use crate::tools::{self, ThinkStart, ToolRequest};
use crate::Loaded;
use crate::Reasoning;

pub(super) async fn chat_completions(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    api::refuse_no_messages(&f)?;
    let Prepared {
        prompt,
        prompt_text,
        g,
        constraint,
        tools,
        splitter,
    } = prepare(l, &f)?;
    // llama-server's `verbose` (default: its `--verbose`) adds its native answer as `__verbose`.
    let verbose = f.bool("verbose")?.unwrap_or(req.state.options.verbose);
    let mut g = g;
    let max_tokens_names = ["max_completion_tokens", "max_tokens"];
    req.state
        .options
        .request_defaults
        .apply(&f, &max_tokens_names, &mut g);
    let n = api::choices(&f)?;
    let new_chunks = || ChatChunks {
        answer: AnswerSplitter::new(
            splitter.clone(),
            tools.as_ref().map(|t| t.parser(l.tool_format)),
            || new_id("call").replacen('-', "_", 1),
        ),
        id: new_id("chatcmpl"),
        model: req.state.model_id.clone(),
        created: now_secs(),
        include_usage: g.include_usage,
        with_logprobs: g.logprobs.is_some(),
        timings_per_token: g.timings_per_token,
    };
    if g.stream {
        if n > 1 {
            return Err(ApiError::unsupported(
                "n",
                "more than one choice (n > 1) when streaming",
            ));
        }
        let clock = Clock::start(prompt.len());
        let (rx, guard) = submit(&req.state, l, prompt, &g, constraint.as_ref())?;
        let chunks = new_chunks();
        // llama-server's first chunk: the role, and `content: null` (no text yet).
        let first = chunks.chunk(
            json!({"role": "assistant", "content": null}),
            Value::Null,
            None,
        );
        return Ok(sse(rx, guard, Some(first), chunks, clock));
    }
    // `n` choices are `n` jobs on the same prompt, run side by side in the batch.
    let mut jobs = Vec::with_capacity(n);
    for _ in 0..n {
        let clock = Clock::start(prompt.len());
        jobs.push((
            submit(&req.state, l, prompt.clone(), &g, constraint.as_ref())?,
            clock,
        ));
    }
    let mut choices = Vec::with_capacity(n);
    let mut usage: Option<Usage> = None;
    let mut timings = Value::Null;
    let mut native = Value::Null;
    let chunks = new_chunks();
    for (index, ((rx, guard), clock)) in jobs.into_iter().enumerate() {
        let collected = collect(rx, guard, clock).await?;
        let mut answer_of = new_chunks();
        choices.push(chat_choice(index, &mut answer_of, &collected));
        if verbose && index == 0 {
            native = native::verbose_answer(&collected, &prompt_text, &chunks.model);
        }
        usage = Some(match usage {
            None => collected.usage,
            Some(mut u) => {
                u.completion_tokens += collected.usage.completion_tokens;
                u
            }
        });
        if timings.is_null() {
            timings = collected.timings;
        }
    }
    let usage = usage.ok_or_else(|| ApiError::internal("no choice was generated"))?;
    let mut answer = json!({
        "id": chunks.id,
        "object": "chat.completion",
        "created": chunks.created,
        "model": chunks.model,
        "system_fingerprint": system_fingerprint(),
        "choices": choices,
        "usage": usage_json(&usage),
        "timings": timings,
    });
    if verbose {
        answer["__verbose"] = native;
    }
    Ok(Json(answer).into_response())
}

/// One choice of a whole answer, its text split by a fresh splitter.
fn chat_choice(index: usize, chunks: &mut ChatChunks, collected: &Collected) -> Value {
    let message = answer::fold(&chunks.answer.push(&collected.text, true));
    let logprobs = if chunks.with_logprobs {
        json!({"content": collected.logprobs.iter().map(chat_logprob_json).collect::<Vec<_>>()})
    } else {
        Value::Null
    };
    json!({
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": chat_finish(collected.finish, &chunks.answer),
    })
}

/// A chat body read and its prompt rendered: what the handler submits, and what it needs to
/// write the answer.
pub(crate) struct Prepared {
    pub prompt: Vec<u32>,
    /// The prompt as rendered text (llama-server's `prompt` in `__verbose`).
    pub prompt_text: String,
    pub g: Generation,
    /// The grammar the answer must follow, named by the field it came from (`tools` for the
    /// grammar that forces a tool call).
    pub constraint: Option<(Grammar, &'static str)>,
    pub tools: Option<ToolRequest>,
    pub splitter: Option<ThinkSplitter>,
}

/// The chat handler's steps before the job is submitted.
pub(crate) fn prepare(l: &Loaded, f: &Fields<'_>) -> Result<Prepared, ApiError> {
    let tools = tools::tool_request(f)?;
    let grammar = api::constraint(f)?;
    if let (Some((_, field)), Some(_)) = (&grammar, &tools) {
        return Err(ApiError::invalid(
            field,
            format!("'{field}' cannot be combined with 'tools' unless 'tool_choice' is 'none'"),
        ));
    }
    let mut messages = tools::prepare_messages(api::messages(f)?, tools.as_ref(), l.renders_tools)?;
    let mut turn = final_turn(f, &messages)?;
    if turn == FinalTurn::Continue {
        continued_content(f, &mut messages);
        // Nothing to continue: llama-server's continuation of an empty message is the bare
        // generation prompt.
        let empty = messages
            .last()
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            == Some("");
        if empty
            && messages
                .last()
                .is_some_and(|m| m.get("tool_calls").is_none())
        {
            messages.pop();
            turn = FinalTurn::Open;
        }
    }
    let mut g = api::generation(f, &["max_completion_tokens", "max_tokens"], l.n_vocab)?;
    g.logprobs = api::chat_logprobs(f)?;
    let extra_kwargs = match f.get("chat_template_kwargs") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "chat_template_kwargs",
                "'chat_template_kwargs' must be an object",
            ))
        }
    };
    let (prompt, prompt_text, splitter, think) =
        render_prompt(l, messages, tools.as_ref(), extra_kwargs, turn)?;
    let constraint = match (grammar, &tools) {
        (Some(grammar), _) => Some(grammar),
        (None, Some(t)) => {
            tools::forced_call_grammar(t, think, l.tool_format).map(|g| (g, "tools"))
        }
        (None, None) => None,
    };
    Ok(Prepared {
        prompt,
        prompt_text,
        g,
        constraint,
        tools,
        splitter,
    })
}

/// How the rendered prompt ends: with the template's opening of a new assistant turn, with the
/// last (assistant) message left open for the model to continue, or as the template leaves it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FinalTurn {
    Open,
    Continue,
    AsRendered,
}

/// `add_generation_prompt` (default true) and `continue_final_message` (vLLM's and transformers'
/// name, default false), refused together as llama-server does; and, as llama-server, a list
/// ending in two assistant messages is refused (which one would be continued?). Without
/// `continue_final_message`, a final assistant message is continued too (llama-server's
/// `--prefill-assistant`, on by default), whatever `add_generation_prompt` says.
fn final_turn(f: &Fields<'_>, messages: &[Value]) -> Result<FinalTurn, ApiError> {
    let add = f.bool("add_generation_prompt")?;
    let cont = f.bool("continue_final_message")?;
    fn role(m: Option<&Value>) -> Option<&str> {
        m.and_then(|m| m.get("role")).and_then(Value::as_str)
    }
    let n = messages.len();
    if n >= 2
        && role(messages.get(n - 1)) == Some("assistant")
        && role(messages.get(n - 2)) == Some("assistant")
    {
        return Err(ApiError::invalid(
            "messages",
            "'messages' cannot end with two assistant messages",
        ));
    }
    if cont.is_none() && role(messages.last()) == Some("assistant") {
        return Ok(FinalTurn::Continue);
    }
    if cont == Some(true) {
        if add == Some(true) {
            return Err(ApiError::invalid(
                "continue_final_message",
                "'continue_final_message' and 'add_generation_prompt' cannot both be true",
            ));
        }
        if role(messages.last()) != Some("assistant") {
            return Err(ApiError::invalid(
                "continue_final_message",
                "'continue_final_message' needs the last message to be the assistant's",
            ));
        }
        return Ok(FinalTurn::Continue);
    }
    Ok(if add == Some(false) {
        FinalTurn::AsRendered
    } else {
        FinalTurn::Open
    })
}

/// The variables llama-server gives every chat template besides the request's own kwargs (which
/// win): `enable_thinking` from `--reasoning` (see [`Reasoning`]), and today's date as
/// `date_string` ("26 Nov 2026", which Llama 3.x templates print as "Today Date") and `datetime`
/// ("Nov 26 2026", firefunction's) — llama.cpp's `common_chat_extra_context`.
pub(super) fn llama_server_kwargs(l: &Loaded, kwargs: &mut Map<String, Value>) {
    let think = match l.reasoning {
        Reasoning::Auto => l.thinking_switch,
        Reasoning::On => true,
        Reasoning::Off => false,
    };
    kwargs
        .entry("enable_thinking")
        .or_insert(Value::Bool(think));
    for (name, format) in [("date_string", "%d %b %Y"), ("datetime", "%b %d %Y")] {
        if let Ok(date) = strftime_local(format) {
            kwargs.entry(name).or_insert(Value::String(date));
        }
    }
}

/// The continued assistant message's text as llama-server appends it (`render_content`): its
/// text parts joined by a blank line, where other messages' parts are joined as they come.
fn continued_content(f: &Fields<'_>, messages: &mut [Value]) {
    let raw = f
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array);
    let (Some(parts), Some(last)) = (raw, messages.last_mut()) else {
        return;
    };
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    last["content"] = Value::String(texts.join("\n\n"));
}

/// `--reasoning off` with a template that opens `<think>` after the generation prompt whatever
/// it is told (DeepSeek-R1, QwQ): the block is closed at once, as llama-server does.
pub(super) fn close_open_think(l: &Loaded, prompt: &mut String) {
    if l.reasoning == Reasoning::Off && prompt.trim_end_matches('\n').ends_with("<think>") {
        prompt.push_str("</think>");
    }
}

/// The prompt's tokens through the chat template, and where the answer starts relative to a
/// `<think>` block (read off the rendered text): the splitter for the answer, and what the
/// forcing grammar of tool calls must allow first.
fn render_prompt(
    l: &Loaded,
    messages: Vec<Value>,
    tools: Option<&ToolRequest>,
    extra_kwargs: Map<String, Value>,
    turn: FinalTurn,
) -> Result<(Vec<u32>, String, Option<ThinkSplitter>, ThinkStart), ApiError> {
    let last_content = messages
        .last()
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let template = l.template.as_ref().ok_or_else(|| {
        ApiError::invalid(
            "messages",
            "this model has no chat template: use /v1/completions",
        )
    })?;
    let mut request = ChatRequest {
        messages,
        tools: tools.filter(|_| l.renders_tools).map(|t| t.tools.clone()),
        add_generation_prompt: turn == FinalTurn::Open,
        extra_kwargs,
    };
    llama_server_kwargs(l, &mut request.extra_kwargs);
    // Special-token text in the messages stays text (see `literal`).
    if let Some(control) = &l.control_texts {
        literal::refuse_marks_in(&request.messages, "messages")?;
        literal::refuse_marks_in(request.tools.as_deref().unwrap_or_default(), "tools")?;
        for (key, value) in &request.extra_kwargs {
            literal::refuse_marks(value, &format!("chat_template_kwargs.{key}"))?;
        }
        control.mark(&mut request.messages);
    }
    let rendered = template
        .render(&request, &l.tokenizer.template_specials())
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let (mut prompt_text, mut literal) = literal::unmark(&rendered);
    if turn == FinalTurn::Open {
        close_open_think(l, &mut prompt_text);
    }
    if turn == FinalTurn::Continue {
        // The template closes every message; the last one is reopened by cutting the render
        // where its content ends (as llama-server does for an assistant prefill).
        let end = prompt_text
            .rfind(last_content.as_str())
            .filter(|_| !last_content.is_empty())
            .map(|at| at + last_content.len())
            .ok_or_else(|| {
                ApiError::invalid(
                    "continue_final_message",
                    "the final message's content does not appear in the rendered prompt",
                )
            })?;
        prompt_text.truncate(end);
        literal.retain(|r| r.start < end);
        for r in &mut literal {
            r.end = r.end.min(end);
        }
    }
    let prompt = l
        .tokenizer
        .encode_with_literal(&prompt_text, true, &literal)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let (splitter, think) =
        answer::answer_start(&prompt_text, l.thinks, tools.map(|_| l.tool_format));
    Ok((prompt, prompt_text, splitter, think))
}

/// A chat answer that stopped by itself after calling tools ends with `tool_calls`.
fn chat_finish(f: Finish, answer: &AnswerSplitter) -> &'static str {
    match f {
        Finish::Stop if answer.called() => "tool_calls",
        f => finish_name(f),
    }
}

fn chat_logprob_json(lp: &TokenLogprob) -> Value {
    json!({
        "token": lossy(&lp.token),
        "logprob": lp.logprob,
        "bytes": lp.token,
        "top_logprobs": lp.top.iter().map(|t| json!({
            "token": lossy(&t.token), "logprob": t.logprob, "bytes": t.token,
        })).collect::<Vec<_>>(),
    })
}

/// A streamed chat answer: `chat.completion.chunk`s, each holding one delta of the answer.
struct ChatChunks {
    answer: AnswerSplitter,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    with_logprobs: bool,
    timings_per_token: bool,
}

impl ChatChunks {
    fn chunk(&self, delta: Value, logprobs: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": system_fingerprint(),
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        })
    }
}

impl Chunks for ChatChunks {
    fn token(&mut self, text: String, logprob: Option<TokenLogprob>) -> Vec<Value> {
        let lp = match (&logprob, self.with_logprobs) {
            (Some(lp), true) => json!({"content": [chat_logprob_json(lp)]}),
            _ => Value::Null,
        };
        let deltas = self.answer.push(&text, false);
        if deltas.is_empty() && !lp.is_null() {
            return vec![self.chunk(json!({}), lp, None)];
        }
        // The token's log-probability goes with its first delta.
        let mut lp = Some(lp);
        deltas
            .into_iter()
            .map(|d| self.chunk(d, lp.take().unwrap_or(Value::Null), None))
            .collect()
    }

    fn timings_per_token(&self) -> bool {
        self.timings_per_token
    }

    fn done(&mut self, finish: Finish, text: String, usage: &Usage, timings: Value) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .answer
            .push(&text, true)
            .into_iter()
            .map(|d| self.chunk(d, Value::Null, None))
            .collect();
        let mut last = self.chunk(
            json!({}),
            Value::Null,
            Some(chat_finish(finish, &self.answer)),
        );
        if self.include_usage {
            last["usage"] = Value::Null;
        }
        out.push(last);
        if self.include_usage {
            let mut u = self.chunk(json!({}), Value::Null, None);
            u["choices"] = json!([]);
            u["usage"] = usage_json(usage);
            out.push(u);
        }
        if let Some(last) = out.last_mut() {
            last["timings"] = timings;
        }
        out
    }
}
