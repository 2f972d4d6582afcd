//! `oxibonsai`: one binary over the library crates. Each subcommand is one module in `cmd/`.
//!
//! `main` maps the outcome to an exit code: 0 on success, 1 on any user-facing error (printed as
//! one line with its whole context chain), and a closed stdout (e.g. `| head`) counts as success.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "oxibonsai",
    version,
    about = "Inference engine for 1-bit and ternary LLMs (and ordinary GGUF models)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show a model file's architecture, dimensions, tensor types and tokenizer.
    Info(cmd::info::Args),
    /// Check every key and tensor of a GGUF file; list all problems (exit code 1 if any).
    Validate(cmd::validate::Args),
    /// Tokenize text with a model's vocabulary and print the token ids.
    Tokenize(cmd::tokenize::Args),
    /// Render a chat request with the model's chat template and print the prompt.
    Template(cmd::template::Args),
    /// Generate text from a prompt.
    Run(cmd::run::Args),
    /// Chat with a model in the terminal (its chat template; the KV cache kept between turns).
    Chat(cmd::chat::Args),
    /// Print the logits of each position (teacher-forced), then greedy steps.
    Logits(cmd::logits::Args),
    /// Embeddings of texts, pooled as llama.cpp pools them (like llama-embedding).
    Embed(cmd::embed::Args),
    /// Perplexity of a text, and KL divergence against a saved base (like llama-perplexity).
    Perplexity(cmd::perplexity::Args),
    /// Measure prompt processing and generation speed (like llama-bench).
    Bench(cmd::bench::Args),
    /// Write a random-weight GGUF of a published Bonsai shape.
    Synth(cmd::synth::Args),
    /// Re-quantize a GGUF model to another file type (like llama-quantize).
    Quantize(cmd::quantize::Args),
    /// Serve the model over an OpenAI-compatible HTTP API (with a chat page at /).
    Serve(cmd::serve::Args),
    /// Convert a Hugging Face checkpoint folder (safetensors) to GGUF.
    Convert(cmd::convert::Args),
    /// Download a file from the Hugging Face Hub into its cache and print the local path.
    Pull(cmd::pull::Args),
    /// List the GPU adapters found, and the device `--device auto` picks.
    Devices(cmd::devices::Args),
}

fn main() -> ExitCode {
    // Mesa's implicit Vulkan layer that reorders adapters (VK_LAYER_MESA_device_select) asks the
    // display server for the default one while `--device auto` lists adapters, printing "error:
    // XDG_RUNTIME_DIR is invalid…" on a machine without a session; the engine picks adapters
    // itself, so the layer is turned off (set here, before any thread exists).
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
    init_logging();
    // Usage errors exit with 1 like every other user error (clap's own default is 2);
    // --help and --version print and exit 0.
    let cli = match Cli::try_parse_from(cmd::long_aliases(std::env::args_os())) {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { 1 } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let outcome = match cli.command {
        Command::Info(args) => cmd::info::run(args),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Tokenize(args) => cmd::tokenize::run(args),
        Command::Template(args) => cmd::template::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Chat(args) => cmd::chat::run(args),
        Command::Logits(args) => cmd::logits::run(args),
        Command::Embed(args) => cmd::embed::run(args),
        Command::Perplexity(args) => cmd::perplexity::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Synth(args) => cmd::synth::run(args),
        Command::Quantize(args) => cmd::quantize::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Convert(args) => cmd::convert::run(args),
        Command::Pull(args) => cmd::pull::run(args),
        Command::Devices(args) => cmd::devices::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OXIBONSAI_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
