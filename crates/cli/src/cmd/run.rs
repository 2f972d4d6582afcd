//! `oxibonsai run -m MODEL -p PROMPT`: generate text, streamed as it is produced, then prompt and
//! generation speed on stderr. `--json-schema` / `--grammar` hold the output to a grammar.
//! `--chat --tools FILE` offers tools as the server does (same validation, prompt, forcing
//! grammar and call parser); `--json` prints the answer as one OpenAI chat message.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::constraint::{Constraint, ConstraintVocab, Grammar};
use oxibonsai_engine::generate::{generate_speculative, GenerateOptions, StopReason};
use oxibonsai_engine::speculative::Speculation;
use oxibonsai_server::answer::{answer_start, fold, AnswerSplitter};
use oxibonsai_server::api::Fields;
use oxibonsai_server::tools::{
    forced_call_grammar, prepare_messages, tool_request, ToolCallFormat, ToolRequest,
};
use oxibonsai_tokenizer::chat_template::{ChatRequest, ChatTemplate};
use oxibonsai_tokenizer::Tokenizer;
use serde_json::json;

use super::draft_args::DraftArgs;
use super::model_args::{PromptArgs, RunModelArgs, SamplingArgs};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: RunModelArgs,
    #[command(flatten)]
    prompt: PromptArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    draft: DraftArgs,
    /// Tokens to generate (-1: until the model ends or the context is full).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    chat: bool,
    /// System message for --chat.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Extra template variables for --chat as JSON, e.g. '{"enable_thinking": false}'.
    #[arg(long = "chat-template-kwargs", requires = "chat", value_name = "JSON")]
    chat_template_kwargs: Option<String>,
    /// Stop when this text is generated (repeatable); it is not printed.
    #[arg(long = "stop", value_name = "TEXT")]
    stop: Vec<String>,
    /// Print control tokens (e.g. `<|im_end|>`) when they are generated.
    #[arg(long)]
    show_special: bool,
    /// Constrain the output to be JSON valid against the JSON schema in FILE.
    #[arg(long = "json-schema", value_name = "FILE", conflicts_with = "grammar")]
    json_schema: Option<PathBuf>,
    /// Constrain the output to the grammar in FILE (GBNF for `.gbnf`, Lark for `.lark`, else
    /// as --grammar-format says).
    #[arg(long, value_name = "FILE")]
    grammar: Option<PathBuf>,
    /// How to read --grammar: gbnf, lark or regex (default: from the file's extension).
    #[arg(long = "grammar-format", value_enum, requires = "grammar")]
    grammar_format: Option<GrammarFormat>,
    /// Tools the model may call (with --chat): a JSON list in OpenAI's form,
    /// `[{"type": "function", "function": {"name": …, "parameters": {…}}}]`.
    #[arg(long, value_name = "FILE", requires = "chat", conflicts_with_all = ["grammar", "json_schema"])]
    tools: Option<PathBuf>,
    /// none, auto, required, or the name of one function to call.
    #[arg(
        long = "tool-choice",
        value_name = "CHOICE",
        requires = "tools",
        default_value = "auto"
    )]
    tool_choice: String,
    /// With --chat: print the answer as one JSON object, `{"message": {"role": "assistant",
    /// "content", "reasoning_content"?, "tool_calls"?}, "finish_reason"}` (OpenAI's chat message),
    /// instead of streaming the text.
    #[arg(long, requires = "chat")]
    json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum GrammarFormat {
    Gbnf,
    Lark,
    Regex,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let text = match args.prompt.text()? {
        Some(text) => text,
        None => bail!("no prompt given (use -p TEXT or -f FILE)"),
    };
    // Read and checked before the model loads: a bad grammar or tool list fails fast.
    let mut grammar = grammar_of(&args)?;
    let tools = tools_of(&args)?;
    let mut loaded = args.model.load()?;
    args.draft.prepare(&mut loaded.model)?;
    let model = Arc::new(loaded.model);
    let mut drafter =
        args.draft
            .drafter(&model, &loaded.tokenizer, loaded.n_ctx, args.model.threads)?;
    let mut speculation = match drafter.as_deref_mut() {
        Some(d) => Some(Speculation::new(d, args.draft.limits()?)),
        None => None,
    };
    let template_source = match args.chat {
        true => Some(
            model
                .file
                .metadata()
                .get_str("tokenizer.chat_template")
                .context("--chat: the model has no chat template")?
                .to_owned(),
        ),
        false => None,
    };
    let format = template_source.as_deref().map(ToolCallFormat::of_template);
    let (prompt_text, parse_special) = match &template_source {
        Some(source) => (
            chat_prompt(&loaded.tokenizer, source, &text, tools.as_ref(), &args)?,
            true,
        ),
        None => (text, args.prompt.parse_special),
    };
    let thinks = loaded.tokenizer.token_id("<think>").is_some()
        && loaded.tokenizer.token_id("</think>").is_some();
    let (think_splitter, think) = answer_start(&prompt_text, thinks, tools.as_ref().and(format));
    if let (Some(t), Some(format), Some(path)) = (&tools, format, &args.tools) {
        if let Some(g) = forced_call_grammar(t, think, format) {
            grammar = Some((g, path.clone()));
        }
    }
    let prompt = loaded.tokenizer.encode(&prompt_text, true, parse_special)?;
    if prompt.is_empty() {
        bail!("the prompt is empty: it gave no tokens");
    }
    if prompt.len() >= loaded.n_ctx {
        bail!(
            "the prompt has {} tokens, which does not fit the context of {} (raise -c/--ctx)",
            prompt.len(),
            loaded.n_ctx
        );
    }
    let options = GenerateOptions {
        n_predict: usize::try_from(args.n_predict).ok(),
        sampling: args.sampling.params()?,
        stop: args.stop.clone(),
        render_special: args.show_special,
    };
    let tokenizer = Arc::new(loaded.tokenizer);
    let mut constraint = match &grammar {
        Some((grammar, source)) => {
            let vocab = ConstraintVocab::new(tokenizer.clone())?;
            Some(
                Constraint::new(&vocab, grammar)
                    .with_context(|| format!("cannot use '{}'", source.display()))?,
            )
        }
        None => None,
    };
    let mut seq = model.new_sequence(loaded.n_ctx)?;
    let mut out = std::io::stdout().lock();
    let mut write_error = None;
    let mut answer = String::new();
    let stats = generate_speculative(
        &model,
        &mut seq,
        &tokenizer,
        &prompt,
        &options,
        constraint.as_mut(),
        speculation.as_mut(),
        &AtomicBool::new(false),
        |piece| {
            if args.json {
                answer.push_str(piece);
                return true;
            }
            match out.write_all(piece.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => true,
                Err(err) => {
                    write_error = Some(err);
                    false
                }
            }
        },
    )?;
    if let Some(err) = write_error {
        return Err(err.into());
    }
    if args.json {
        let parser = tools.as_ref().zip(format).map(|(t, f)| t.parser(f));
        let mut splitter = AnswerSplitter::new(think_splitter, parser, next_call_id);
        let message = fold(&splitter.push(&answer, true));
        let finish = match stats.stop_reason {
            StopReason::Length | StopReason::ContextFull => "length",
            _ if splitter.called() => "tool_calls",
            _ => "stop",
        };
        serde_json::to_writer(
            &mut out,
            &json!({"message": message, "finish_reason": finish}),
        )?;
    }
    writeln!(out)?;
    out.flush()?;
    eprintln!(
        "prompt: {} tokens, {:.1} tokens/s | generation: {} tokens, {:.1} tokens/s | stop: {:?}",
        stats.prompt_tokens,
        stats.prompt_tokens_per_s(),
        stats.generated_tokens,
        stats.generation_tokens_per_s(),
        stats.stop_reason
    );
    if let Some(s) = &speculation {
        eprintln!("{}", draft_summary(s));
    }
    if let (Some(constraint), Some((_, source))) = (&mut constraint, &grammar) {
        if !constraint.is_accepting() {
            eprintln!(
                "warning: generation stopped ({:?}) before the output was complete under '{}' \
                 (raise -n/--n-predict or -c/--ctx)",
                stats.stop_reason,
                source.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The end-of-run line on drafting: drafted and accepted tokens and the acceptance rate.
pub fn draft_summary(s: &Speculation<'_>) -> String {
    let rate = if s.drafted > 0 {
        100.0 * s.accepted as f64 / s.drafted as f64
    } else {
        0.0
    };
    let mut line = format!(
        "draft ({}): {} tokens drafted, {} accepted ({rate:.1}%)",
        s.drafter.name(),
        s.drafted,
        s.accepted
    );
    if s.recomputed > 0 {
        line.push_str(&format!(", {} positions recomputed", s.recomputed));
    }
    line
}

/// The grammar asked for on the command line, with the file it came from.
fn grammar_of(args: &Args) -> Result<Option<(Grammar, PathBuf)>> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).with_context(|| format!("cannot read '{}'", path.display()))
    };
    if let Some(path) = &args.json_schema {
        let schema = serde_json::from_str(&read(path)?)
            .with_context(|| format!("--json-schema '{}' is not JSON", path.display()))?;
        return Ok(Some((Grammar::JsonSchema(schema), path.clone())));
    }
    let Some(path) = &args.grammar else {
        return Ok(None);
    };
    let extension = path.extension().and_then(|e| e.to_str());
    let format = match (args.grammar_format, extension) {
        (Some(format), _) => format,
        (None, Some("gbnf")) => GrammarFormat::Gbnf,
        (None, Some("lark")) => GrammarFormat::Lark,
        (None, _) => bail!(
            "cannot tell the format of --grammar '{}' from its extension: name it .gbnf or \
             .lark, or say --grammar-format gbnf|lark|regex",
            path.display()
        ),
    };
    let source = read(path)?;
    let grammar = match format {
        GrammarFormat::Gbnf => Grammar::Gbnf(source),
        GrammarFormat::Lark => Grammar::Lark(source),
        // A pattern file usually ends with a newline that is not part of the pattern.
        GrammarFormat::Regex => Grammar::Regex(source.trim_end_matches(['\n', '\r']).to_owned()),
    };
    Ok(Some((grammar, path.clone())))
}

/// `--tools` and `--tool-choice`, checked as the server checks a request's `tools` and
/// `tool_choice` (`None`: no tools, or `--tool-choice none`).
fn tools_of(args: &Args) -> Result<Option<ToolRequest>> {
    let Some(path) = &args.tools else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read '{}'", path.display()))?;
    let tools: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--tools '{}' is not JSON", path.display()))?;
    let choice = match args.tool_choice.as_str() {
        c @ ("none" | "auto" | "required") => json!(c),
        name => json!({"type": "function", "function": {"name": name}}),
    };
    let body = json!({"tools": tools, "tool_choice": choice});
    let fields = Fields::new(&body).map_err(|e| anyhow::anyhow!("{e}"))?;
    tool_request(&fields).map_err(|e| anyhow::anyhow!("--tools '{}': {e}", path.display()))
}

/// Call ids as OpenAI writes them (`call_…`), numbered within the run.
fn next_call_id() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("call_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn chat_prompt(
    tokenizer: &Tokenizer,
    source: &str,
    user: &str,
    tools: Option<&ToolRequest>,
    args: &Args,
) -> Result<String> {
    let template =
        ChatTemplate::new(source).context("the model's chat template does not compile")?;
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": user}));
    let extra_kwargs = match &args.chat_template_kwargs {
        Some(text) => {
            serde_json::from_str(text).context("--chat-template-kwargs is not a JSON object")?
        }
        None => serde_json::Map::new(),
    };
    // A template without a place for tools gets them in the system message, as the server does.
    let renders_tools = source.contains("tools");
    let messages = prepare_messages(messages, tools, renders_tools)
        .map_err(|e| anyhow::anyhow!("--tools: {e}"))?;
    let request = ChatRequest {
        messages,
        tools: tools.filter(|_| renders_tools).map(|t| t.tools.clone()),
        add_generation_prompt: true,
        extra_kwargs,
    };
    Ok(template.render(&request, &tokenizer.template_specials())?)
}
