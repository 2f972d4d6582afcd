//! OpenAI request bodies → what the engine runs, field by field, with a 400 naming the field for
//! every value that is wrong or not implemented. Unknown extra fields are ignored.

use oxibonsai_engine::sampling::SamplingParams;
use oxibonsai_engine::Grammar;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The sampling and stopping part shared by both completion endpoints.
#[derive(Debug, Clone)]
pub struct Generation {
    pub sampling: SamplingParams,
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Chosen-token log-probabilities with this many alternatives.
    pub logprobs: Option<usize>,
    /// llama-server's `post_sampling_probs`: those probabilities are taken after the sampler
    /// chain (the distribution the token was drawn from) instead of the model's.
    pub post_sampling_probs: bool,
    /// llama-server's `timings_per_token`: every streamed chunk carries the timings so far.
    pub timings_per_token: bool,
    /// The field holding the prompt (`messages`, `prompt`), named by a context-length error.
    pub prompt_param: &'static str,
}

/// The most choices (`n`) one request may ask for: each is a job of its own.
pub const MAX_CHOICES: i64 = 16;

pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    pub fn new(body: &'a Value) -> Result<Fields<'a>, ApiError> {
        body.as_object()
            .map(|obj| Fields { obj })
            .ok_or_else(|| ApiError::invalid("body", "the request body must be a JSON object"))
    }

    /// The field, treating JSON null as absent.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    pub fn f32_in(&self, name: &str, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if (f64::from(lo)..=f64::from(hi)).contains(&x) => Ok(Some(x as f32)),
                _ => Err(ApiError::invalid(
                    name,
                    format!("'{name}' must be a number between {lo} and {hi}, got {v}"),
                )),
            },
        }
    }

    pub fn int_in(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
                _ => Err(ApiError::invalid(
                    name,
                    format!("'{name}' must be an integer between {lo} and {hi}, got {v}"),
                )),
            },
        }
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ApiError::invalid(
                name,
                format!("'{name}' must be true or false, got {v}"),
            )),
        }
    }

    pub fn string(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(ApiError::invalid(
                name,
                format!("'{name}' must be a string, got {v}"),
            )),
        }
    }
}

/// Sampling, stopping and streaming fields, the same for chat and text completions.
/// `max_tokens_names` lists the accepted spellings of the limit, first match wins.
pub fn generation(
    f: &Fields<'_>,
    max_tokens_names: &[&str],
    n_vocab: usize,
) -> Result<Generation, ApiError> {
    if let Some(best_of) = f.int_in("best_of", i64::MIN, i64::MAX)? {
        if best_of != 1 {
            return Err(ApiError::unsupported("best_of", "best_of > 1"));
        }
    }
    let sampling = sampling(f, n_vocab)?;
    let mut max_tokens = None;
    for name in max_tokens_names {
        if let Some(n) = f.int_in(name, 1, i64::from(u32::MAX))? {
            max_tokens = Some(n as usize);
            break;
        }
    }
    let stop = stop(f)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = include_usage(f)?;
    sampling
        .validate(n_vocab)
        .map_err(|e| ApiError::invalid("sampling", e.to_string()))?;
    Ok(Generation {
        sampling,
        max_tokens,
        stop,
        stream,
        include_usage,
        logprobs: None,
        post_sampling_probs: false,
        timings_per_token: f.bool("timings_per_token")?.unwrap_or(false),
        prompt_param: "messages",
    })
}

/// The server's defaults for fields a request leaves out (`serve --temp`, `--seed`, `-n`, as
/// llama-server's command line sets them).
#[derive(Debug, Clone, Default)]
pub struct RequestDefaults {
    pub temperature: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<usize>,
}

impl RequestDefaults {
    /// Fills what the request did not give; `max_tokens_names` as for [`generation`].
    pub fn apply(&self, f: &Fields<'_>, max_tokens_names: &[&str], g: &mut Generation) {
        if f.get("temperature").is_none() {
            if let Some(t) = self.temperature {
                g.sampling.temperature = t;
            }
        }
        if f.get("seed").is_none() && self.seed.is_some() {
            g.sampling.seed = self.seed;
        }
        if max_tokens_names.iter().all(|n| f.get(n).is_none()) && self.max_tokens.is_some() {
            g.max_tokens = self.max_tokens;
        }
    }
}

/// `n`: how many choices to generate for the prompt (1 to [`MAX_CHOICES`]).
pub fn choices(f: &Fields<'_>) -> Result<usize, ApiError> {
    Ok(f.int_in("n", 1, MAX_CHOICES)?.unwrap_or(1) as usize)
}

/// The sampling fields (checked as a whole by the caller, once every field has been read).
fn sampling(f: &Fields<'_>, n_vocab: usize) -> Result<SamplingParams, ApiError> {
    // OpenAI's defaults where they differ from llama.cpp's CLI: temperature 1, top_p 1, and no
    // top-k / min-p truncation unless asked.
    let mut s = SamplingParams {
        temperature: f.f32_in("temperature", 0.0, 2.0)?.unwrap_or(1.0),
        top_p: f.f32_in("top_p", 0.0, 1.0)?.unwrap_or(1.0),
        top_k: match f.int_in("top_k", -1, i64::from(u32::MAX))? {
            None | Some(-1) | Some(0) => 0,
            Some(k) => k as usize,
        },
        min_p: f.f32_in("min_p", 0.0, 1.0)?.unwrap_or(0.0),
        ..SamplingParams::default()
    };
    s.presence_penalty = f.f32_in("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    s.frequency_penalty = f.f32_in("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    for name in ["repetition_penalty", "repeat_penalty"] {
        if let Some(p) = f.f32_in(name, 0.01, 10.0)? {
            s.repeat_penalty = p;
        }
    }
    s.seed = match f.get("seed") {
        None => None,
        Some(v) => Some(
            v.as_i64()
                .map(|x| x as u64)
                .or_else(|| v.as_u64())
                .ok_or_else(|| {
                    ApiError::invalid("seed", format!("'seed' must be an integer, got {v}"))
                })?,
        ),
    };
    s.logit_bias.extend(logit_bias(f, n_vocab)?);
    Ok(s)
}

/// `logit_bias`: token id → bias between -100 and 100.
fn logit_bias(f: &Fields<'_>, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(bias) = f.get("logit_bias") else {
        return Ok(Vec::new());
    };
    let map = bias.as_object().ok_or_else(|| {
        ApiError::invalid("logit_bias", "'logit_bias' must map token ids to numbers")
    })?;
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map {
        let id: u32 = key
            .parse()
            .ok()
            .filter(|&id: &u32| (id as usize) < n_vocab)
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!("'logit_bias' key '{key}' is not a token id below {n_vocab}"),
                )
            })?;
        let b = value
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!("'logit_bias' value for {key} must be between -100 and 100"),
                )
            })?;
        // As OpenAI documents: -100 bans the token, 100 forces it.
        let b = if b <= -100.0 {
            f32::NEG_INFINITY
        } else {
            b as f32
        };
        out.push((id, b));
    }
    // A request that bans every token could only fail once generating.
    let mut banned: Vec<u32> = out
        .iter()
        .filter(|(_, b)| *b == f32::NEG_INFINITY)
        .map(|(id, _)| *id)
        .collect();
    banned.sort_unstable();
    banned.dedup();
    if banned.len() >= n_vocab {
        return Err(ApiError::invalid(
            "logit_bias",
            "'logit_bias' bans every token (-100 on all of them): nothing could be generated",
        ));
    }
    Ok(out)
}

/// `stop`: a string or a list of strings, none empty.
fn stop(f: &Fields<'_>) -> Result<Vec<String>, ApiError> {
    let not_strings = || ApiError::invalid("stop", "'stop' must be a string or a list of strings");
    let stop = match f.get("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(not_strings))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(not_strings()),
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            "'stop' strings must not be empty",
        ));
    }
    Ok(stop)
}

/// `stream_options.include_usage`.
fn include_usage(f: &Fields<'_>) -> Result<bool, ApiError> {
    match f.get("stream_options") {
        None => Ok(false),
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ApiError::invalid(
                "stream_options.include_usage",
                "'stream_options.include_usage' must be true or false",
            )),
        },
        Some(_) => Err(ApiError::invalid(
            "stream_options",
            "'stream_options' must be an object",
        )),
    }
}

/// Chat `logprobs` (bool) + `top_logprobs` (0..=20).
pub fn chat_logprobs(f: &Fields<'_>) -> Result<Option<usize>, ApiError> {
    let top = f.int_in("top_logprobs", 0, 20)?;
    match f.bool("logprobs")? {
        Some(true) => Ok(Some(top.unwrap_or(0) as usize)),
        _ if top.is_some_and(|t| t > 0) => Err(ApiError::invalid(
            "top_logprobs",
            "'top_logprobs' needs 'logprobs': true",
        )),
        _ => Ok(None),
    }
}

/// `response_format`: nothing for text, else the grammar every answer is held to (a token mask
/// each step, not a check afterwards).
pub fn response_format(f: &Fields<'_>) -> Result<Option<Grammar>, ApiError> {
    let Some(format) = f.get("response_format") else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        // llama-server's extension: `json_object` with a `schema` holds the answer to it.
        Some("json_object") => match format.get("schema") {
            None | Some(Value::Null) => Ok(Some(Grammar::JsonObject)),
            Some(schema @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(schema.clone()))),
            Some(_) => Err(ApiError::invalid(
                "response_format.schema",
                "'response_format.schema' must be a JSON schema object",
            )),
        },
        Some("json_schema") => {
            let spec = format.get("json_schema").ok_or_else(|| {
                ApiError::invalid(
                    "response_format.json_schema",
                    "'response_format.json_schema' is required for type json_schema",
                )
            })?;
            let schema = spec
                .get("schema")
                .filter(|s| s.is_object())
                .ok_or_else(|| {
                    ApiError::invalid(
                        "response_format.json_schema.schema",
                        "'response_format.json_schema.schema' must be a JSON schema object",
                    )
                })?;
            Ok(Some(Grammar::JsonSchema(schema.clone())))
        }
        Some(other) => Err(ApiError::unsupported(
            "response_format",
            &format!("response_format type '{other}'"),
        )),
        None => Err(ApiError::invalid(
            "response_format",
            "'response_format' must be an object with a 'type'",
        )),
    }
}

/// The answer's constraint and the field it came from: `response_format`, or one of the
/// extensions other servers take — llama.cpp's `grammar` (GBNF) and `json_schema`, vLLM's
/// `guided_json`, `guided_regex`, `guided_choice` and `guided_grammar` (GBNF when it has `::=`
/// rules, else Lark). At most one may be given.
pub fn constraint(f: &Fields<'_>) -> Result<Option<(Grammar, &'static str)>, ApiError> {
    let mut found: Option<(Grammar, &'static str)> = None;
    let mut take = |grammar: Grammar, field: &'static str| -> Result<(), ApiError> {
        if let Some((_, first)) = &found {
            return Err(ApiError::invalid(
                field,
                format!("'{field}' and '{first}' both constrain the answer: give one"),
            ));
        }
        check_patterns(&grammar, field)?;
        found = Some((grammar, field));
        Ok(())
    };
    if let Some(g) = response_format(f)? {
        take(g, "response_format")?;
    }
    for field in ["json_schema", "guided_json"] {
        match f.get(field) {
            None => {}
            Some(v @ Value::Object(_)) => take(Grammar::JsonSchema(v.clone()), field)?,
            Some(Value::String(s)) if field == "guided_json" => {
                let schema = serde_json::from_str::<Value>(s)
                    .ok()
                    .filter(Value::is_object)
                    .ok_or_else(|| {
                        ApiError::invalid(field, format!("'{field}' must be a JSON schema object"))
                    })?;
                take(Grammar::JsonSchema(schema), field)?;
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    field,
                    format!("'{field}' must be a JSON schema object"),
                ))
            }
        }
    }
    if let Some(pattern) = f.string("guided_regex")? {
        take(Grammar::Regex(pattern.to_owned()), "guided_regex")?;
    }
    if let Some(source) = f.string("grammar")? {
        take(Grammar::Gbnf(source.to_owned()), "grammar")?;
    }
    if let Some(source) = f.string("guided_grammar")? {
        let grammar = if source.contains("::=") {
            Grammar::Gbnf(source.to_owned())
        } else {
            Grammar::Lark(source.to_owned())
        };
        take(grammar, "guided_grammar")?;
    }
    if let Some(choice) = f.get("guided_choice") {
        let options = choice
            .as_array()
            .filter(|list| !list.is_empty())
            .and_then(|list| list.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                ApiError::invalid(
                    "guided_choice",
                    "'guided_choice' must be a non-empty list of strings",
                )
            })?;
        let alternatives: Vec<String> = options.iter().map(|o| regex::escape(o)).collect();
        take(
            Grammar::Regex(format!("(?:{})", alternatives.join("|"))),
            "guided_choice",
        )?;
    }
    Ok(found)
}

/// The largest automaton a pattern may compile to (the `regex` crate's default limit). The
/// grammar engine builds its lexer lazily, token by token: a pattern past this (nested counted
/// repetitions such as `((a{1,100}){1,100}){1,100}`) would fail it mid-answer, so it is refused
/// when the request arrives.
const PATTERN_SIZE_LIMIT: usize = 10 << 20;

/// 400 naming `field` if a regular expression of the grammar (the regex itself, a JSON schema's
/// `pattern`s and `patternProperties`) is too complex. Patterns the `regex` crate cannot read are
/// left to the grammar engine, which reports its own errors.
fn check_patterns(grammar: &Grammar, field: &str) -> Result<(), ApiError> {
    let mut patterns = Vec::new();
    match grammar {
        Grammar::Regex(pattern) => patterns.push(pattern.as_str()),
        Grammar::JsonSchema(schema) => schema_patterns(schema, &mut patterns),
        _ => {}
    }
    for pattern in patterns {
        let built = regex::RegexBuilder::new(pattern)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build();
        if let Err(regex::Error::CompiledTooBig(_)) = built {
            return Err(ApiError::invalid(
                field,
                format!(
                    "'{field}': a pattern is too complex for the grammar engine (its automaton \
                     passes {} MiB): use smaller repetition counts",
                    PATTERN_SIZE_LIMIT >> 20
                ),
            ));
        }
    }
    Ok(())
}

fn schema_patterns<'v>(schema: &'v Value, out: &mut Vec<&'v str>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("pattern", Value::String(p)) => out.push(p),
                    ("patternProperties", Value::Object(props)) => {
                        out.extend(props.keys().map(String::as_str));
                        props.values().for_each(|v| schema_patterns(v, out));
                    }
                    _ => schema_patterns(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| schema_patterns(v, out)),
        _ => {}
    }
}

/// OpenAI's chat route takes at least one message.
pub fn refuse_no_messages(f: &Fields<'_>) -> Result<(), ApiError> {
    match f.get("messages") {
        Some(Value::Array(list)) if list.is_empty() => Err(ApiError::invalid(
            "messages",
            "'messages' must not be empty",
        )),
        _ => Ok(()),
    }
}

/// The chat messages, normalized for the template: content as a string (text parts joined),
/// `developer` as `system`. An empty list is the template's to judge, as in llama-server (the
/// OpenAI route refuses it itself: [`refuse_no_messages`]).
pub fn messages(f: &Fields<'_>) -> Result<Vec<Value>, ApiError> {
    let list = match f.get("messages") {
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::invalid("messages", "'messages' must be a list")),
        None => return Err(ApiError::invalid("messages", "'messages' is required")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let param = format!("messages[{i}]");
        let obj = m
            .as_object()
            .ok_or_else(|| ApiError::invalid(&param, format!("'{param}' must be an object")))?;
        let role = match obj.get("role").and_then(Value::as_str) {
            Some(r @ ("system" | "user" | "assistant" | "tool")) => r,
            Some("developer") => "system",
            Some(other) => {
                return Err(ApiError::invalid(
                    &format!("{param}.role"),
                    format!("'{param}.role' '{other}' is not one of system, developer, user, assistant, tool"),
                ))
            }
            None => {
                return Err(ApiError::invalid(
                    &format!("{param}.role"),
                    format!("'{param}.role' is required"),
                ))
            }
        };
        let content = match obj.get("content") {
            None | Some(Value::Null) if role == "assistant" => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, part) in parts.iter().enumerate() {
                    let p = format!("{param}.content[{j}]");
                    match part.get("type").and_then(Value::as_str) {
                        Some("text") => match part.get("text").and_then(Value::as_str) {
                            Some(t) => text.push_str(t),
                            None => {
                                return Err(ApiError::invalid(
                                    &p,
                                    format!("'{p}.text' must be a string"),
                                ))
                            }
                        },
                        Some("image_url") => return Err(ApiError::media_unsupported("image")),
                        Some("input_audio") => return Err(ApiError::media_unsupported("audio")),
                        Some(other) => {
                            return Err(ApiError::unsupported(
                                &format!("{p}.type"),
                                &format!("content part type '{other}'"),
                            ))
                        }
                        None => {
                            return Err(ApiError::invalid(&p, format!("'{p}.type' is required")))
                        }
                    }
                }
                text
            }
            _ => {
                return Err(ApiError::invalid(
                    &format!("{param}.content"),
                    format!("'{param}.content' must be a string or a list of text parts"),
                ))
            }
        };
        let mut message = Map::new();
        message.insert("role".into(), Value::String(role.to_owned()));
        message.insert("content".into(), Value::String(content));
        if let Some(name) = obj.get("name").and_then(Value::as_str) {
            message.insert("name".into(), Value::String(name.to_owned()));
        }
        // Checked and converted with the tools (`tools::prepare_messages`).
        if role == "assistant" {
            for key in ["tool_calls", "reasoning_content"] {
                if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
                    message.insert(key.into(), v.clone());
                }
            }
        }
        if role == "tool" {
            if let Some(id) = obj.get("tool_call_id").and_then(Value::as_str) {
                message.insert("tool_call_id".into(), Value::String(id.to_owned()));
            }
        }
        out.push(Value::Object(message));
    }
    Ok(out)
}
