//! The request parsers without the HTTP layer, for the property tests (`request_props`) and the
//! fuzz target of request bodies (`crates/server/fuzz`): [`parse`], the steps that need no model
//! in the handlers' order — a chat or completion body → the job's parts (`tools`, the constraint
//! fields, the messages and their tool calls, sampling and stopping, log-probabilities) — and
//! [`JobChecker`], the handlers' own code from the body to the engine's [`Job`] over a model's
//! vocabulary and chat template (a vocabulary-only GGUF file is enough). Whatever the body, each
//! step either succeeds or is a 400 naming a field.

use std::sync::mpsc;

use oxibonsai_gguf::GgufFile;
use serde_json::Value;
use tokio::sync::mpsc::unbounded_channel;

use crate::api::{self, Fields};
use crate::error::{ApiError, ServerError};
use crate::literal;
use crate::routes::{check_job, prepare_chat, prepare_completion, CheckedJob};
use crate::scheduler::Job;
use crate::tools::{self, ThinkStart};
use crate::{Loaded, ModelText};

/// Which endpoint's body.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint {
    /// `/v1/chat/completions`, for a template that renders `tools` itself or not.
    Chat { renders_tools: bool },
    /// `/v1/completions`.
    Completion,
}

/// The body's bytes through the endpoint's parsing steps.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<(), ApiError> {
    parse_value(endpoint, &json(body)?)
}

/// The body as JSON, with the server's error for anything else.
fn json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("body", format!("the request body is not valid JSON: {e}")))
}

/// The handlers' view of a loaded model, without weights or an engine thread: request bodies in,
/// the jobs the engine would get out (never queued).
pub struct JobChecker {
    loaded: Loaded,
}

impl JobChecker {
    /// The file's tokenizer and chat template, a context of `n_ctx` tokens, the vocabulary's
    /// size as the model's, and the server's defaults otherwise.
    pub fn new(file: &GgufFile, n_ctx: usize) -> Result<JobChecker, ServerError> {
        let text = ModelText::read(file)?;
        let n_vocab = text.tokenizer.vocab_size();
        // Nothing receives the jobs: they are returned instead.
        let (jobs, _) = mpsc::channel();
        let embedding = crate::EmbeddingSetup {
            pooling: oxibonsai_engine::Pooling::Mean,
            width: 0,
            rerank_template: None,
        };
        let loaded = Loaded::new(text, n_ctx, n_vocab, jobs, false, embedding)?;
        Ok(JobChecker { loaded })
    }

    pub fn n_vocab(&self) -> usize {
        self.loaded.n_vocab
    }

    pub fn n_ctx(&self) -> usize {
        self.loaded.n_ctx
    }

    /// `POST /v1/chat/completions` with this body: the job, or the handler's error.
    pub fn chat(&self, body: &[u8]) -> Result<Job, ApiError> {
        let body = json(body)?;
        let p = prepare_chat(&self.loaded, &Fields::new(&body)?)?;
        let checked = check_job(&self.loaded, p.prompt, &p.g, p.constraint.as_ref())?;
        Ok(unqueued(checked))
    }

    /// `POST /v1/completions` with this body: the job, or the handler's error.
    pub fn completion(&self, body: &[u8]) -> Result<Job, ApiError> {
        let body = json(body)?;
        let (prompt, g, grammar) = prepare_completion(&self.loaded, &Fields::new(&body)?)?;
        Ok(unqueued(check_job(
            &self.loaded,
            prompt,
            &g,
            grammar.as_ref(),
        )?))
    }
}

/// The job as the engine would get it; its events go nowhere.
fn unqueued(checked: CheckedJob) -> Job {
    let (events, _) = unbounded_channel();
    checked.into_job(events)
}

/// [`parse`] of a body already read as JSON.
pub fn parse_value(endpoint: Endpoint, body: &Value) -> Result<(), ApiError> {
    match endpoint {
        Endpoint::Chat { renders_tools } => chat(body, renders_tools),
        Endpoint::Completion => completion(body),
    }
}

/// The chat handler's parsing steps, in its order, up to the template.
fn chat(body: &Value, renders_tools: bool) -> Result<(), ApiError> {
    let f = Fields::new(body)?;
    let tools = tools::tool_request(&f)?;
    api::constraint(&f)?;
    let messages = tools::prepare_messages(api::messages(&f)?, tools.as_ref(), renders_tools)?;
    literal::refuse_marks_in(&messages, "messages")?;
    serde_json::to_string(&messages).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    api::generation(&f, &["max_completion_tokens", "max_tokens"], 1000)?;
    api::chat_logprobs(&f)?;
    if let Some(t) = &tools {
        for think in [ThinkStart::None, ThinkStart::Inside, ThinkStart::Optional] {
            for format in [tools::ToolCallFormat::Json, tools::ToolCallFormat::Xml] {
                let _ = tools::forced_call_grammar(t, think, format);
            }
        }
    }
    Ok(())
}

/// The completion handler's parsing steps (the prompt's tokens aside).
fn completion(body: &Value) -> Result<(), ApiError> {
    let f = Fields::new(body)?;
    f.bool("echo")?;
    f.string("suffix")?;
    api::generation(&f, &["max_tokens"], 1000)?;
    f.int_in("logprobs", 0, 5)?;
    api::constraint(&f)?;
    Ok(())
}
