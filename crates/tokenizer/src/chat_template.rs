//! Chat templates: renders `tokenizer.chat_template` (a Jinja template, the same text as
//! transformers' `tokenizer_config.json`) the way `transformers.apply_chat_template(tokenize=False)`
//! does, byte for byte.
//!
//! transformers renders with Jinja2 set up as `trim_blocks=True, lstrip_blocks=True` (and the
//! default `keep_trailing_newline=False`), real Python string methods, a `tojson` that is
//! `json.dumps`, and the globals `raise_exception` and `strftime_now`. MiniJinja gives the same
//! language; the Python-facing pieces are recreated in [`python`] and [`python_json`].
//!
//! Known differences from Jinja2 (none is exercised by the Qwen3, Qwen3.5 or SmolLM2 templates):
//! values joined with `~` use MiniJinja's text form for lists and dicts (`{{ … }}` output and
//! `|string` are Python's `str()`); tuples are lists; integers beyond 64 bits arrive from JSON as
//! floats; `tojson` writes lazy sequences (`|reverse`, `|select`) as arrays where `json.dumps`
//! would refuse them; `strftime_now` refuses a conversion code chrono lacks where glibc would
//! copy it through. `{% generation %}` blocks (transformers' assistant-mask extension) render
//! their body, as transformers does when no mask is requested.

mod builtin;
mod python;
mod python_json;
mod request;

pub use builtin::{builtin_names, builtin_template};
pub use request::{parse_tool_call_arguments, ChatRequest};

use minijinja::value::{Kwargs, Value as JinjaValue};
use minijinja::{AutoEscape, Environment, Error as JinjaError, ErrorKind, UndefinedBehavior};
use serde_json::{Map, Value};

/// The name the template is registered under; it appears in MiniJinja's own messages.
const TEMPLATE_NAME: &str = "chat_template";

/// Template variables transformers sets itself; a request's extra kwargs may not replace them
/// (Python would raise "got multiple values for keyword argument").
const RESERVED_VARIABLES: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// The special-token strings of the vocabulary, exposed to templates as `bos_token` and
/// `eos_token` (many templates start with `{{ bos_token }}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos_token: String,
    pub eos_token: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template does not parse.
    #[error("chat template syntax error at line {line}: {message}")]
    Syntax { line: usize, message: String },
    /// The template called `raise_exception(message)`: the request is not one it accepts.
    #[error("chat template rejected the conversation: {message}")]
    Raised { message: String },
    /// Anything else that went wrong while rendering (an undefined method, a type error …).
    #[error("chat template failed{}: {message}", line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Render {
        line: Option<usize>,
        message: String,
    },
    /// The request itself is malformed: `location` names the field, e.g.
    /// `messages[2].tool_calls[0].function.arguments`.
    #[error("bad chat request at {location}: {problem}")]
    BadRequest { location: String, problem: String },
}

/// A compiled chat template, built once per model and rendered per request.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The template as given (servers report it, as llama-server's `/props` does).
    source: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

/// Marks the error `raise_exception` returns so that rendering can report it as
/// [`TemplateError::Raised`] however MiniJinja wraps it on the way out.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl std::fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

impl ChatTemplate {
    /// Compiles `source`. A syntax error names its line.
    pub fn new(source: &str) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(python::call_method);
        env.set_formatter(|out, _state, value| {
            let mut text = String::new();
            python::python_str(&mut text, value);
            out.write_str(&text).map_err(JinjaError::from)
        });
        env.add_filter("tojson", python_json::tojson_filter);
        env.add_filter("string", |v: &JinjaValue| python::string_filter(v));
        env.add_test("sequence", python::is_sequence);
        env.add_test("iterable", python::is_iterable);
        env.add_test("number", python::is_number);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, without_generation_tags(source))
            .map_err(|e| render_error(&e))?;
        Ok(ChatTemplate {
            env,
            source: source.to_owned(),
        })
    }

    /// The template's source, as given to [`ChatTemplate::new`].
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders a conversation: `messages`, `tools` (`none` when absent, as transformers passes
    /// it), `documents` (`none`), `add_generation_prompt`, the special tokens, and the request's
    /// extra kwargs (e.g. `enable_thinking`), which may override the special tokens.
    pub fn render(
        &self,
        request: &ChatRequest,
        specials: &SpecialTokens,
    ) -> Result<String, TemplateError> {
        let mut variables = Map::new();
        variables.insert("bos_token".into(), specials.bos_token.clone().into());
        variables.insert("eos_token".into(), specials.eos_token.clone().into());
        for (name, value) in &request.extra_kwargs {
            if RESERVED_VARIABLES.contains(&name.as_str()) {
                return Err(TemplateError::BadRequest {
                    location: format!("extra_kwargs.{name}"),
                    problem: "this variable is set from the request itself".into(),
                });
            }
            variables.insert(name.clone(), value.clone());
        }
        variables.insert("messages".into(), Value::Array(request.messages.clone()));
        variables.insert(
            "tools".into(),
            request.tools.clone().map_or(Value::Null, Value::Array),
        );
        variables.insert("documents".into(), Value::Null);
        variables.insert(
            "add_generation_prompt".into(),
            request.add_generation_prompt.into(),
        );
        self.render_variables(&variables)
    }

    /// Renders with exactly these top-level variables (for tools and tests that drive a template
    /// directly). JSON objects keep their key order.
    pub fn render_variables(
        &self,
        variables: &Map<String, Value>,
    ) -> Result<String, TemplateError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| render_error(&e))?;
        template
            .render(JinjaValue::from_serialize(variables))
            .map_err(|e| render_error(&e))
    }
}

/// transformers' `{% generation %}…{% endgeneration %}` marks assistant text for its training
/// mask and renders the body unchanged; MiniJinja has no such tag, so it becomes an equivalent
/// `{% if true %}…{% endif %}` keeping the whitespace-control marks (and so the output) intact.
fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        out.push_str(&rest[..open]);
        let tag = &rest[open..];
        let Some(close) = tag.find("%}") else {
            // An unterminated tag: left for the parser to report.
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..close];
        let (left_mark, body) = split_mark_start(inner);
        let (body, right_mark) = split_mark_end(body);
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(word) => {
                out.push_str("{%");
                out.push_str(left_mark);
                out.push(' ');
                out.push_str(word);
                out.push(' ');
                out.push_str(right_mark);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..close + 2]),
        }
        rest = &tag[close + 2..];
    }
    out.push_str(rest);
    out
}

fn split_mark_start(inner: &str) -> (&str, &str) {
    match inner.as_bytes().first() {
        Some(b'-' | b'+') => inner.split_at(1),
        _ => ("", inner),
    }
}

fn split_mark_end(inner: &str) -> (&str, &str) {
    match inner.as_bytes().last() {
        Some(b'-' | b'+') => inner.split_at(inner.len() - 1),
        _ => (inner, ""),
    }
}

/// MiniJinja's message without its "(in template:line)" suffix, which the variants carry apart.
fn describe(error: &JinjaError) -> String {
    match error.detail() {
        Some(detail) => format!("{}: {detail}", kind_name(error.kind())),
        None => kind_name(error.kind()).to_owned(),
    }
}

fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::SyntaxError => "syntax error",
        ErrorKind::UnknownMethod => "unknown method",
        ErrorKind::UnknownFilter => "unknown filter",
        ErrorKind::UnknownTest => "unknown test",
        ErrorKind::UnknownFunction => "unknown function",
        ErrorKind::UndefinedError => "undefined value",
        ErrorKind::MissingArgument => "missing argument",
        ErrorKind::TooManyArguments => "too many arguments",
        ErrorKind::InvalidOperation => "invalid operation",
        ErrorKind::CannotUnpack => "cannot unpack",
        ErrorKind::BadSerialization => "cannot serialize",
        _ => "error",
    }
}

fn syntax_error(error: &JinjaError) -> TemplateError {
    TemplateError::Syntax {
        line: error.line().unwrap_or(0),
        message: error.detail().unwrap_or("unexpected input").to_owned(),
    }
}

fn render_error(error: &JinjaError) -> TemplateError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(raised) = current.downcast_ref::<RaisedByTemplate>() {
            return TemplateError::Raised {
                message: raised.0.clone(),
            };
        }
        source = current.source();
    }
    if error.kind() == ErrorKind::SyntaxError {
        return syntax_error(error);
    }
    // MiniJinja reports the innermost cause as the detail of a wrapping error; keep the chain.
    let mut message = describe(error);
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        cause = inner.source();
    }
    TemplateError::Render {
        line: error.line(),
        message,
    }
}

/// `raise_exception(message)`: the template refuses the conversation.
fn raise_exception(message: String) -> Result<JinjaValue, JinjaError> {
    Err(
        JinjaError::new(ErrorKind::InvalidOperation, message.clone())
            .with_source(RaisedByTemplate(message)),
    )
}

/// `strftime_now(format)`: `datetime.now().strftime(format)`, C strftime codes. Python's `now()`
/// is naive local time, so `%Z` and `%z` print nothing.
fn strftime_now(format: String, kwargs: Kwargs) -> Result<JinjaValue, JinjaError> {
    kwargs.assert_all_used()?;
    strftime_local(&format)
        .map(JinjaValue::from)
        .map_err(|message| JinjaError::new(ErrorKind::InvalidOperation, message))
}

/// The local time now in C strftime `format`, as the templates' `strftime_now` prints it (servers
/// pass dates such as llama-server's `date_string` with it). The error names the format.
pub fn strftime_local(format: &str) -> Result<String, String> {
    use chrono::format::{Fixed, Item, StrftimeItems};
    use std::fmt::Write as _;
    let mut items = Vec::new();
    for item in StrftimeItems::new(format) {
        match item {
            Item::Error => return Err(format!("strftime_now: unsupported format {format:?}")),
            Item::Fixed(
                Fixed::TimezoneName
                | Fixed::TimezoneOffset
                | Fixed::TimezoneOffsetColon
                | Fixed::TimezoneOffsetDoubleColon
                | Fixed::TimezoneOffsetTripleColon
                | Fixed::TimezoneOffsetColonZ
                | Fixed::TimezoneOffsetZ,
            ) => {}
            item => items.push(item),
        }
    }
    let now = chrono::Local::now().naive_local();
    let mut text = String::new();
    write!(text, "{}", now.format_with_items(items.into_iter()))
        .map_err(|_| format!("strftime_now: cannot format {format:?}"))?;
    Ok(text)
}
