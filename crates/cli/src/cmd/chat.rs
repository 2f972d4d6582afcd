//! `oxibonsai chat -m MODEL`: an interactive conversation in the terminal, with line editing and
//! history, the model's chat template, and the KV cache kept from turn to turn (see `session`).
//!
//! Ctrl-C while an answer streams stops that answer (kept, partial, in the conversation); at the
//! prompt it clears the line, and a second one in a row at an empty prompt quits, as do `/exit`
//! and Ctrl-D.

mod session;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use oxibonsai_engine::generate::{GenerateOptions, GenerationStats, StopReason};
use rustyline::error::ReadlineError;
use rustyline::{
    Cmd, ConditionalEventHandler, Event, EventContext, EventHandler, KeyEvent, RepeatCount,
};
use serde_json::{Map, Value};

use super::draft_args::DraftArgs;
use super::model_args::{RunModelArgs, SamplingArgs};
use oxibonsai_tokenizer::reasoning::ThinkSplitter;
use session::{Session, Turn};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: RunModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    draft: DraftArgs,
    /// Tokens to generate per answer at most (-1: until the model ends its turn or the context is full).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// System message (also settable in the chat with /system TEXT).
    #[arg(long)]
    system: Option<String>,
    /// Hide <think>…</think> sections and ask the template not to think (enable_thinking=false).
    #[arg(long = "no-think")]
    no_think: bool,
    /// Print how many tokens each turn feeds the model and how many it reuses from the cache.
    #[arg(short = 'v', long)]
    verbose: bool,
}

const HELP: &str =
    "commands: /reset  /system TEXT  /save FILE  /exit (or Ctrl-D); Ctrl-C stops an answer";

/// A line typed at the prompt.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    Message(String),
    Reset,
    /// `/system` alone goes back to the template's default.
    System(Option<String>),
    Save(PathBuf),
    Exit,
    Help,
    Empty,
    /// A command that is not one, or one missing its argument: the message to show.
    Invalid(String),
}

fn parse_input(line: &str) -> Input {
    let line = line.trim();
    if line.is_empty() {
        return Input::Empty;
    }
    let Some(command) = line.strip_prefix('/') else {
        return Input::Message(line.to_owned());
    };
    let (name, argument) = match command.split_once(char::is_whitespace) {
        Some((name, argument)) => (name, argument.trim()),
        None => (command, ""),
    };
    match (name, argument) {
        ("reset", "") => Input::Reset,
        ("system", "") => Input::System(None),
        ("system", text) => Input::System(Some(text.to_owned())),
        ("save", "") => Input::Invalid("/save needs a file name: /save FILE".to_owned()),
        ("save", path) => Input::Save(PathBuf::from(path)),
        ("exit" | "quit", "") => Input::Exit,
        ("help" | "?", _) => Input::Help,
        _ => Input::Invalid(format!("unknown command '/{command}'; {HELP}")),
    }
}

/// While it lives, Ctrl-C leaves the terminal's pending output alone. By default the line
/// discipline that turns Ctrl-C into SIGINT also discards the output not yet shown, so the last
/// words of an interrupted answer — which the conversation keeps — could vanish from the screen
/// (`NOFLSH` off). The terminal's flags are put back on drop; nothing is done off a terminal.
struct KeepOutputOnInterrupt {
    #[cfg(unix)]
    saved: Option<nix::sys::termios::Termios>,
}

impl KeepOutputOnInterrupt {
    #[cfg(unix)]
    fn set() -> Self {
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).ok().filter(|t| {
            let mut keep = t.clone();
            keep.local_flags.insert(LocalFlags::NOFLSH);
            !t.local_flags.contains(LocalFlags::NOFLSH)
                && tcsetattr(&stdin, SetArg::TCSANOW, &keep).is_ok()
        });
        KeepOutputOnInterrupt { saved }
    }

    #[cfg(not(unix))]
    fn set() -> Self {
        KeepOutputOnInterrupt {}
    }
}

impl Drop for KeepOutputOnInterrupt {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}

/// Ctrl-C at the prompt: records whether the line was empty, then interrupts as usual.
struct PromptInterrupt {
    line_was_empty: Arc<AtomicBool>,
}

impl ConditionalEventHandler for PromptInterrupt {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        self.line_was_empty
            .store(ctx.line().is_empty(), Ordering::Relaxed);
        Some(Cmd::Interrupt)
    }
}

/// ANSI dim, used only where the stream is a terminal and NO_COLOR is unset.
struct Style {
    stdout: bool,
    stderr: bool,
}

impl Style {
    fn detect() -> Style {
        let allowed = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Style {
            stdout: allowed && std::io::stdout().is_terminal(),
            stderr: allowed && std::io::stderr().is_terminal(),
        }
    }

    fn dim(enabled: bool, text: &str) -> String {
        if enabled {
            format!("\x1b[2m{text}\x1b[22m")
        } else {
            text.to_owned()
        }
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut loaded = args.model.load()?;
    args.draft.prepare(&mut loaded.model)?;
    let model = Arc::new(loaded.model);
    let mut kwargs = Map::new();
    if args.no_think {
        kwargs.insert("enable_thinking".into(), Value::Bool(false));
    }
    let mut session = Session::new(
        &model,
        &loaded.tokenizer,
        loaded.n_ctx,
        kwargs,
        args.system.clone(),
    )?;
    if let Some(drafter) =
        args.draft
            .drafter(&model, &loaded.tokenizer, loaded.n_ctx, args.model.threads)?
    {
        session.set_drafter(drafter, args.draft.limits()?);
    }
    let options = GenerateOptions {
        n_predict: usize::try_from(args.n_predict).ok(),
        sampling: args.sampling.params()?,
        stop: Vec::new(),
        render_special: false,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let cancel = Arc::clone(&cancel);
        // At the prompt the terminal is in raw mode and Ctrl-C reaches rustyline as a key, so
        // the signal only arrives while an answer is being generated.
        ctrlc::set_handler(move || cancel.store(true, Ordering::Relaxed))
            .context("cannot install the Ctrl-C handler")?;
    }
    let _keep_output = KeepOutputOnInterrupt::set();
    let (mut editor, line_was_empty) = line_editor()?;
    let style = Style::detect();
    eprintln!(
        "{}",
        Style::dim(
            style.stderr,
            &format!(
                "chat with {} (context {} tokens). {HELP}",
                args.model.model, loaded.n_ctx
            )
        )
    );
    let mut turn_number = 0usize;
    let mut interrupted_at_empty_prompt = false;
    loop {
        let line = match editor.readline("> ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                let empty = line_was_empty.load(Ordering::Relaxed);
                if empty && interrupted_at_empty_prompt {
                    break;
                }
                interrupted_at_empty_prompt = empty;
                if empty {
                    eprintln!("(Ctrl-C again, /exit or Ctrl-D to quit)");
                }
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(err) => return Err(err).context("cannot read the prompt"),
        };
        interrupted_at_empty_prompt = false;
        let input = parse_input(&line);
        if !matches!(input, Input::Empty) {
            // History is a convenience: a failure to record a line is not worth stopping for.
            let _ = editor.add_history_entry(line.trim());
        }
        match input {
            Input::Empty => {}
            Input::Exit => break,
            Input::Help => eprintln!("{HELP}"),
            Input::Invalid(message) => eprintln!("{message}"),
            Input::Reset => {
                session.reset();
                eprintln!("(conversation reset)");
            }
            Input::System(text) => {
                let message = match &text {
                    Some(_) => "(system prompt set; conversation reset)",
                    None => "(system prompt cleared; conversation reset)",
                };
                session.set_system(text);
                eprintln!("{message}");
            }
            Input::Save(path) => match save(&session, &path) {
                Ok(()) => eprintln!("(conversation saved to {})", path.display()),
                Err(err) => eprintln!("error: {err:#}"),
            },
            Input::Message(text) => {
                let turns = Turns {
                    options: &options,
                    cancel: &cancel,
                    style: &style,
                    args: &args,
                };
                turns.take(&mut session, &text, &mut turn_number);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A line editor whose Ctrl-C tells whether the line was empty (the flag it returns), so that
/// two in a row at an empty prompt quit.
fn line_editor() -> Result<(rustyline::DefaultEditor, Arc<AtomicBool>)> {
    let mut editor = rustyline::DefaultEditor::new().context("cannot set up line editing")?;
    let line_was_empty = Arc::new(AtomicBool::new(true));
    editor.bind_sequence(
        KeyEvent::ctrl('C'),
        EventHandler::Conditional(Box::new(PromptInterrupt {
            line_was_empty: Arc::clone(&line_was_empty),
        })),
    );
    Ok((editor, line_was_empty))
}

/// What every turn of the conversation shares.
struct Turns<'a> {
    options: &'a GenerateOptions,
    cancel: &'a Arc<AtomicBool>,
    style: &'a Style,
    args: &'a Args,
}

impl Turns<'_> {
    /// One user message and its answer; an error is printed and the conversation goes on.
    fn take(&self, session: &mut Session<'_>, text: &str, turn_number: &mut usize) {
        let turn = match session.begin_turn(text) {
            Ok(turn) => {
                *turn_number += 1;
                turn
            }
            Err(err) => {
                eprintln!("error: {err:#}");
                return;
            }
        };
        let turn_number = *turn_number;
        if self.args.verbose {
            eprintln!(
                "[turn {turn_number}: feeding {} tokens, {} reused from the cache, conversation {} tokens]",
                turn.feed.len(),
                turn.reused,
                turn.total
            );
        }
        tracing::debug!(
            turn = turn_number,
            fed = turn.feed.len(),
            reused = turn.reused,
            total = turn.total,
            "chat turn"
        );
        self.cancel.store(false, Ordering::Relaxed);
        match answer(
            session,
            turn,
            self.options,
            self.cancel,
            self.style,
            self.args.no_think,
        ) {
            Ok(stats) => report(&stats, self.style, session.n_ctx()),
            Err(err) => eprintln!("error: {err:#}"),
        }
    }
}

/// Which part of an answer a span of text belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Answer,
    Thinking,
}

/// Streams one answer to stdout, thinking sections dimmed (or hidden).
fn answer(
    session: &mut Session<'_>,
    turn: Turn,
    options: &GenerateOptions,
    cancel: &AtomicBool,
    style: &Style,
    hide_thinking: bool,
) -> Result<GenerationStats> {
    let mut out = std::io::stdout().lock();
    let mut splitter = if turn.starts_thinking {
        ThinkSplitter::thinking()
    } else {
        ThinkSplitter::default()
    };
    let mut write_error = None;
    let mut show = |part: Part, text: &str| {
        let shown = match part {
            Part::Answer => text.to_owned(),
            Part::Thinking if hide_thinking => return,
            Part::Thinking => Style::dim(style.stdout, text),
        };
        if let Err(err) = out.write_all(shown.as_bytes()).and_then(|()| out.flush()) {
            write_error.get_or_insert(err);
        }
    };
    let mut show_parts = |(thinking, answer): (String, String)| {
        if !thinking.is_empty() {
            show(Part::Thinking, &thinking);
        }
        if !answer.is_empty() {
            show(Part::Answer, &answer);
        }
    };
    let stats = session.answer(turn, options, cancel, |piece| {
        show_parts(splitter.push(piece));
    })?;
    show_parts(splitter.finish());
    if let Some(err) = write_error {
        return Err(err).context("cannot write the answer");
    }
    writeln!(out)?;
    out.flush()?;
    Ok(stats)
}

fn report(stats: &GenerationStats, style: &Style, n_ctx: usize) {
    let why = match stats.stop_reason {
        StopReason::EndOfGeneration | StopReason::StopString => String::new(),
        StopReason::Cancelled => " — interrupted".to_owned(),
        StopReason::Length => " — stopped at the -n limit".to_owned(),
        StopReason::ContextFull => format!(
            " — the context is full ({n_ctx} tokens): /reset to start over, or raise -c/--ctx"
        ),
    };
    eprintln!(
        "{}",
        Style::dim(
            style.stderr,
            &format!(
                "[{} tokens, {:.1} tokens/s; prompt {} tokens, {:.1} tokens/s{}{why}]",
                stats.generated_tokens,
                stats.generation_tokens_per_s(),
                stats.prompt_tokens,
                stats.prompt_tokens_per_s(),
                draft_counts(stats),
            )
        )
    );
}

/// Drafted and accepted tokens of an answer generated with speculative decoding.
fn draft_counts(stats: &GenerationStats) -> String {
    if stats.draft_tokens == 0 {
        return String::new();
    }
    format!(
        "; drafted {}, accepted {} ({:.1}%)",
        stats.draft_tokens,
        stats.draft_accepted,
        100.0 * stats.draft_accepted as f64 / stats.draft_tokens as f64
    )
}

fn save(session: &Session<'_>, path: &std::path::Path) -> Result<()> {
    let mut text = serde_json::to_string_pretty(&session.to_json())?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("cannot write '{}'", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_lines_parse_into_commands_and_messages() {
        assert_eq!(
            parse_input("  hello there "),
            Input::Message("hello there".into())
        );
        assert_eq!(parse_input("   "), Input::Empty);
        assert_eq!(parse_input("/reset"), Input::Reset);
        assert_eq!(parse_input("/exit"), Input::Exit);
        assert_eq!(parse_input("/system"), Input::System(None));
        assert_eq!(
            parse_input("/system  You are terse. "),
            Input::System(Some("You are terse.".into()))
        );
        assert_eq!(
            parse_input("/save a b.json"),
            Input::Save("a b.json".into())
        );
        assert!(matches!(parse_input("/save"), Input::Invalid(m) if m.contains("/save FILE")));
        assert!(
            matches!(parse_input("/frobnicate x"), Input::Invalid(m) if m.contains("/frobnicate x"))
        );
        assert!(matches!(parse_input("/reset now"), Input::Invalid(_)));
    }
}
