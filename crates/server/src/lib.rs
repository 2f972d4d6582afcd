//! `oxibonsai serve`: an OpenAI-compatible HTTP server.
//!
//! Shape: axum handlers on tokio parse and validate requests, render the chat template and
//! tokenize, then hand a [`scheduler::Job`] with a response channel to the engine thread, which
//! owns the model and runs every active request in one batched forward pass per step
//! (continuous batching, see [`scheduler`]). Handlers never touch the model.

pub mod answer;
pub mod api;
pub mod error;
mod listen;
mod literal;
pub mod metrics;
pub mod request_check;
#[cfg(test)]
mod request_jobs;
#[cfg(test)]
mod request_props;
mod routes;
pub mod scheduler;
pub mod sleep;
mod step_budget;
pub mod tools;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use oxibonsai_engine::{
    open_backend, Backend, ConstraintVocab, CpuBackend, DeviceChoice, Model, RuntimeBackend,
};
use oxibonsai_gguf::GgufFile;
use oxibonsai_tokenizer::chat_template::{ChatRequest, ChatTemplate, SpecialTokens};
use oxibonsai_tokenizer::Tokenizer;

pub use crate::error::{ApiError, ServerError};
use crate::metrics::Metrics;
use crate::scheduler::{SchedulerConfig, Work};

/// How the server runs (the `serve` command's flags).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub model_path: PathBuf,
    /// The model's names for the API, comma-separated (llama-server's `--alias`): `/v1/models`
    /// lists them as `aliases` and reports the first in sorted order as the id (default: the file
    /// name without `.gguf`).
    pub alias: Option<String>,
    /// Informational tags, comma-separated (llama-server's `--tags`), listed by `/v1/models`.
    pub tags: Option<String>,
    /// Context of all the slots together, each getting an equal share (llama-server's `-c`;
    /// default: min(the model's, 4096)).
    pub ctx: Option<usize>,
    /// Slots: requests generating at the same time.
    pub parallel: usize,
    /// Requests waiting for a slot beyond which the server answers 429.
    pub max_queue: usize,
    pub api_key: Option<String>,
    pub threads: usize,
    /// Where the model runs (`--device`, `--gpu-layers`); a draft model runs on the CPU.
    pub device: DeviceChoice,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// A request head must arrive within this (it is also the idle keep-alive limit, and the
    /// longest gap between pieces of a body).
    pub header_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Browser origins allowed besides the server's own (`*`: any).
    pub cors_origins: Vec<String>,
    /// Special-token text inside message content becomes control tokens (llama.cpp's default;
    /// off: only the chat template's own markers are control tokens).
    pub parse_special_in_content: bool,
    /// The most prompt tokens an engine step computes over all slots.
    pub prefill_chunk: usize,
    /// While streams are decoding, a step's prompt chunk is sized to keep the step this long
    /// (zero: always `prefill_chunk` tokens).
    pub step_target: Duration,
    /// Recurrent-state checkpoints per slot (models with recurrent layers, e.g. qwen35): a
    /// cached prefix is reused from the latest checkpoint at or before where it ends.
    pub checkpoints: oxibonsai_engine::CheckpointPolicy,
    /// Overrides the file's `<arch>.pooling_type` for the embedding routes.
    pub pooling: Option<oxibonsai_engine::Pooling>,
    /// The KV caches' key and value types (`-ctk` / `-ctv`): a smaller type fits the same
    /// slots and contexts in less memory.
    pub cache_types: oxibonsai_engine::kv_cache::CacheTypes,
    /// Speculative decoding in every slot (`None`: off).
    pub draft: Option<DraftOptions>,
    /// A chat template (Jinja source) used instead of the model file's (`--chat-template`,
    /// `--chat-template-file`).
    pub chat_template: Option<String>,
    /// Defaults for what requests leave out (`--temp`, `--seed`, `-n`).
    pub request_defaults: api::RequestDefaults,
    /// Serve the chat page at `/` (`--no-webui` turns it off).
    pub webui: bool,
    /// llama-server's `--reasoning`: whether the chat template is asked to think.
    pub reasoning: Reasoning,
    /// llama-server's `--reasoning-format`: `false` (`none`) leaves `<think>` sections in the
    /// content instead of splitting them into `reasoning_content`.
    pub split_reasoning: bool,
    /// llama-server's `--verbose`: answers carry `__verbose` unless the request says otherwise.
    pub verbose: bool,
    /// `GET /slots` answers (llama-server's `--slots`, on by default; `--no-slots`: 501).
    pub slots_endpoint: bool,
    /// `POST /props` answers (llama-server's `--props`; off: 501).
    pub props_endpoint: bool,
    /// Where `POST /slots/{id}?action=save|restore` keep slot files (`None`: those actions
    /// answer 501).
    pub slot_save_path: Option<PathBuf>,
    /// llama-server's `--sleep-idle-seconds`: the model is unloaded after this long without a
    /// request needing it (`None`: never), see [`sleep`].
    pub sleep_idle: Option<Duration>,
    /// `GET /metrics` answers (llama-server's `--metrics`; off by default: 501).
    pub metrics_endpoint: bool,
    /// `GET|POST /cors-proxy` forwards to the `url` it names (llama-server's `--ui-mcp-proxy`,
    /// for its web UI's MCP clients; off: 403).
    pub ui_mcp_proxy: bool,
    /// Google Cloud Vertex AI's prediction routes (llama-server's `AIP_MODE=PREDICTION`).
    pub gcp: Option<Gcp>,
}

/// Vertex AI's custom-container contract as llama-server reads it from the environment
/// (`AIP_MODE=PREDICTION`; the port, `AIP_HTTP_PORT`, is the caller's to apply): the prediction
/// route and an extra health route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gcp {
    /// `AIP_PREDICT_ROUTE`, default `/predict`.
    pub predict_route: String,
    /// `AIP_HEALTH_ROUTE`: `/health` also answers there.
    pub health_route: Option<String>,
    /// `AIP_HTTP_PORT`, default 8080: the port to listen on instead of `--port`.
    pub port: u16,
}

impl Gcp {
    /// The settings `env` gives (`None` unless `AIP_MODE` is `PREDICTION`); a route without its
    /// leading `/` gets one, as in llama-server.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Option<Gcp>, String> {
        if env("AIP_MODE").as_deref() != Some("PREDICTION") {
            return Ok(None);
        }
        let route = |name: &str| {
            env(name).filter(|v| !v.is_empty()).map(|v| {
                if v.starts_with('/') {
                    v
                } else {
                    format!("/{v}")
                }
            })
        };
        let port = match env("AIP_HTTP_PORT").filter(|v| !v.is_empty()) {
            Some(v) => v
                .parse()
                .map_err(|_| format!("AIP_HTTP_PORT={v:?} is not a port number"))?,
            None => 8080,
        };
        Ok(Some(Gcp {
            predict_route: route("AIP_PREDICT_ROUTE").unwrap_or_else(|| "/predict".to_owned()),
            health_route: route("AIP_HEALTH_ROUTE"),
            port,
        }))
    }
}

/// llama-server's `--reasoning on|off|auto`: the template's `enable_thinking` for requests that
/// do not set it — `On` true, `Off` false, `Auto` true exactly when the template answers to it
/// (llama-server's `enable_reasoning != 0 && template_supports_thinking`, see
/// [`Loaded::thinking_switch`]). `Off` also closes a `<think>` the template leaves open at the end
/// of the prompt, so the model answers without thinking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reasoning {
    #[default]
    Auto,
    On,
    Off,
}

/// What drafts for speculative decoding, and how much.
#[derive(Clone, Debug)]
pub struct DraftOptions {
    pub source: DraftSource,
    pub limits: oxibonsai_engine::speculative::DraftLimits,
    /// A draft model or head stops drafting below this top probability.
    pub p_min: f32,
}

#[derive(Clone, Debug)]
pub enum DraftSource {
    /// A draft model's file (the same vocabulary as the model's).
    Model(PathBuf),
    PromptLookup(oxibonsai_engine::speculative::PromptLookup),
    /// The model's own multi-token-prediction head (qwen35's `nextn_predict_layers`), loaded
    /// with the model; a file without one is refused at load, naming the key.
    Mtp,
}

impl ServerOptions {
    /// The `serve` command's defaults for `model_path`.
    pub fn new(model_path: PathBuf) -> ServerOptions {
        ServerOptions {
            model_path,
            alias: None,
            tags: None,
            ctx: None,
            parallel: 4,
            max_queue: 64,
            api_key: None,
            threads: 0,
            device: DeviceChoice::default(),
            max_body_bytes: 8 << 20,
            header_timeout: Duration::from_secs(10),
            max_connections: 512,
            cors_origins: Vec::new(),
            parse_special_in_content: false,
            prefill_chunk: scheduler::DEFAULT_PREFILL_CHUNK,
            step_target: scheduler::DEFAULT_STEP_TARGET,
            checkpoints: oxibonsai_engine::CheckpointPolicy::default(),
            pooling: None,
            cache_types: Default::default(),
            draft: None,
            chat_template: None,
            request_defaults: Default::default(),
            webui: true,
            reasoning: Reasoning::Auto,
            split_reasoning: true,
            slots_endpoint: true,
            props_endpoint: false,
            slot_save_path: None,
            sleep_idle: None,
            metrics_endpoint: false,
            ui_mcp_proxy: false,
            gcp: None,
            verbose: false,
        }
    }
}

/// After a shutdown signal, how long running requests may finish before their generations are
/// cancelled, and how long the cancelled ones get to tell their clients before every connection
/// is dropped: the whole stays within 5 s whatever the clients do.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(2500);
const SHUTDOWN_CLOSE: Duration = Duration::from_secs(1);

/// What exists once the model is loaded.
pub(crate) struct Loaded {
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub jobs: Mutex<mpsc::Sender<Work>>,
    /// The pooling of `/v1/embeddings` and `/rerank`: `--pooling`, else the file's, else mean.
    pub pooling: oxibonsai_engine::Pooling,
    /// Floats per embedding (`n_embd`, or the classifier's outputs for rank pooling).
    pub embedding_width: usize,
    /// `tokenizer.chat_template.rerank`, llama.cpp's prompt for a query and a document.
    pub rerank_template: Option<String>,
    /// The chat template renders a `tools` list itself (else the server states the tools in
    /// the system message).
    pub renders_tools: bool,
    /// How the template writes tool calls (JSON or Qwen3.5's XML).
    pub tool_format: tools::ToolCallFormat,
    /// The vocabulary has `<think>` tags (reasoning is split from content).
    pub thinks: bool,
    /// The token trie of constrained decoding (`response_format`), built once.
    pub constraint_vocab: ConstraintVocab,
    /// Control-token texts to keep as text in message content (`None` with
    /// `--parse-special-in-content`).
    pub control_texts: Option<literal::ControlTexts>,
    /// `--reasoning` (see [`Reasoning`]).
    pub reasoning: Reasoning,
    /// The chat template's generation prompt differs with `enable_thinking` true and false
    /// (llama.cpp's test of whether a template supports thinking, `compare_thinking_enabled`).
    pub thinking_switch: bool,
}

/// What the handlers read of a model file besides its weights.
pub(crate) struct ModelText {
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
    renders_tools: bool,
    tool_format: tools::ToolCallFormat,
    thinking_switch: bool,
}

impl ModelText {
    pub(crate) fn read(file: &GgufFile) -> Result<ModelText, ServerError> {
        ModelText::read_with(file, None)
    }

    /// [`ModelText::read`], with `template` (Jinja source) in place of the file's own.
    pub(crate) fn read_with(
        file: &GgufFile,
        template: Option<&str>,
    ) -> Result<ModelText, ServerError> {
        let tokenizer = Arc::new(Tokenizer::from_gguf(file).map_err(ServerError::Tokenizer)?);
        let source = match template {
            Some(source) => Ok(source),
            None => file.metadata().get_str("tokenizer.chat_template"),
        };
        let (template, renders_tools, tool_format) = match source {
            Ok(source) => (
                Some(ChatTemplate::new(source).map_err(ServerError::ChatTemplate)?),
                source.contains("tools"),
                tools::ToolCallFormat::of_template(source),
            ),
            Err(_) => (None, false, tools::ToolCallFormat::Json),
        };
        let thinking_switch = template
            .as_ref()
            .is_some_and(|t| answers_to_thinking(t, &tokenizer.template_specials()));
        Ok(ModelText {
            tokenizer,
            template,
            renders_tools,
            tool_format,
            thinking_switch,
        })
    }
}

/// Whether a one-message conversation's generation prompt changes with `enable_thinking`, as
/// llama.cpp's `compare_thinking_enabled` decides a template supports thinking; a template that
/// fails on the probe does not.
fn answers_to_thinking(template: &ChatTemplate, specials: &SpecialTokens) -> bool {
    let render = |think: bool| {
        let request = ChatRequest {
            messages: vec![serde_json::json!({"role": "user", "content": "test"})],
            tools: None,
            add_generation_prompt: true,
            extra_kwargs: [("enable_thinking".to_owned(), serde_json::Value::Bool(think))]
                .into_iter()
                .collect(),
        };
        template.render(&request, specials).ok()
    };
    match (render(true), render(false)) {
        (Some(on), Some(off)) => on != off,
        _ => false,
    }
}

impl Loaded {
    pub(crate) fn new(
        text: ModelText,
        n_ctx: usize,
        n_vocab: usize,
        jobs: mpsc::Sender<Work>,
        parse_special_in_content: bool,
        embedding: EmbeddingSetup,
    ) -> Result<Loaded, ServerError> {
        let tokenizer = text.tokenizer;
        let thinks =
            tokenizer.token_id("<think>").is_some() && tokenizer.token_id("</think>").is_some();
        let constraint_vocab =
            ConstraintVocab::new(Arc::clone(&tokenizer)).map_err(ServerError::ConstraintVocab)?;
        let control_texts =
            (!parse_special_in_content).then(|| literal::ControlTexts::new(&tokenizer));
        Ok(Loaded {
            constraint_vocab,
            control_texts,
            reasoning: Reasoning::Auto,
            tokenizer,
            template: text.template,
            renders_tools: text.renders_tools,
            tool_format: text.tool_format,
            thinking_switch: text.thinking_switch,
            n_ctx,
            n_vocab,
            jobs: Mutex::new(jobs),
            thinks,
            pooling: embedding.pooling,
            embedding_width: embedding.width,
            rerank_template: embedding.rerank_template,
        })
    }
}

/// What the embedding routes need of a loaded model.
pub(crate) struct EmbeddingSetup {
    pub pooling: oxibonsai_engine::Pooling,
    pub width: usize,
    pub rerank_template: Option<String>,
}

pub struct AppState {
    pub(crate) options: ServerOptions,
    pub(crate) model_id: String,
    /// `--alias`'s names, sorted and without repeats (llama-server keeps a `std::set`).
    pub(crate) aliases: Vec<String>,
    /// `--tags`, sorted and without repeats.
    pub(crate) tags: Vec<String>,
    pub(crate) created: u64,
    pub(crate) loaded: OnceLock<Loaded>,
    pub(crate) load_error: OnceLock<String>,
    /// Where the model runs (`DeviceReport::json`), for `/props`, set at the first load.
    pub(crate) device: OnceLock<serde_json::Value>,
    pub(crate) metrics: Arc<Metrics>,
    /// Requests submitted and not yet finished (generating or waiting).
    pub(crate) in_flight: AtomicUsize,
    pub(crate) shutdown: Arc<AtomicBool>,
    /// The server stopped accepting: new generations are refused (503).
    pub(crate) closing: AtomicBool,
    /// Turns of the text routes (`/tokenize`, `/detokenize`), see `routes::tokenize`.
    pub(crate) text_permits: Arc<tokio::sync::Semaphore>,
    /// Whether the model is unloaded while idle (`--sleep-idle-seconds`).
    pub(crate) sleep: Arc<sleep::Sleep>,
}

/// A comma-separated list as llama-server reads `--alias` and `--tags`: each trimmed, empty ones
/// dropped, sorted, without repeats.
fn name_set(list: Option<&str>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = list
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    set.into_iter().collect()
}

impl AppState {
    pub fn new(options: ServerOptions) -> Arc<AppState> {
        let aliases = name_set(options.alias.as_deref());
        let tags = name_set(options.tags.as_deref());
        let model_id = aliases.first().cloned().unwrap_or_else(|| {
            options
                .model_path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".to_owned())
        });
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Arc::new(AppState {
            model_id,
            aliases,
            tags,
            created,
            loaded: OnceLock::new(),
            load_error: OnceLock::new(),
            device: OnceLock::new(),
            metrics: Arc::new(Metrics::default()),
            in_flight: AtomicUsize::new(0),
            shutdown: Arc::new(AtomicBool::new(false)),
            closing: AtomicBool::new(false),
            text_permits: Arc::new(tokio::sync::Semaphore::new(routes::TEXT_ROUTES_AT_ONCE)),
            sleep: Arc::new(sleep::Sleep::new(options.sleep_idle)),
            options,
        })
    }

    /// Loads the model on a new thread, which then becomes the engine thread. Requests are
    /// answered 503 until it is ready.
    pub fn start_engine(self: &Arc<AppState>) -> std::thread::JoinHandle<()> {
        self.start_engine_after(|| {})
    }

    /// [`AppState::start_engine`], running `before_load` on the engine thread first: a test holds
    /// the load there to observe the loading state.
    pub(crate) fn start_engine_after(
        self: &Arc<AppState>,
        before_load: impl FnOnce() + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let state = Arc::clone(self);
        std::thread::Builder::new()
            .name("oxibonsai-engine".to_owned())
            .spawn(move || {
                before_load();
                if let Err(err) = state.load_and_run() {
                    let text = error::chain(&err);
                    tracing::error!("engine: {text}");
                    let _ = state.load_error.set(text);
                }
            })
            .expect("spawning the engine thread")
    }

    fn load_and_run(self: &Arc<AppState>) -> Result<(), ServerError> {
        let path = &self.options.model_path;
        let file = Arc::new(
            GgufFile::open(path).map_err(|source| ServerError::ModelFile {
                path: path.clone(),
                source: Box::new(source),
            })?,
        );
        let threads = self.options.threads;
        let device = self.options.device;
        let cache_types = self.options.cache_types;
        let mtp = matches!(
            self.options.draft.as_ref().map(|d| &d.source),
            Some(DraftSource::Mtp)
        );
        // After a sleep, the weights are mapped again from the file.
        let mut reload = || -> Result<Model<RuntimeBackend>, oxibonsai_engine::EngineError> {
            let file = Arc::new(GgufFile::open(path)?);
            let device = device.for_model(&file, cache_types);
            let mut model = Model::load(file, open_backend(device, threads)?.0)?;
            model.set_cache_types(cache_types)?;
            if mtp {
                model.load_mtp()?;
            }
            Ok(model)
        };
        let text = ModelText::read_with(&file, self.options.chat_template.as_deref())?;
        let device = device.for_model(&file, cache_types);
        let (backend, note) = open_backend(device, threads).map_err(ServerError::Backend)?;
        let rerank_template = file
            .metadata()
            .opt_str("tokenizer.chat_template.rerank")
            .ok()
            .flatten()
            .map(str::to_owned);
        let mut model = Model::load(file, backend).map_err(ServerError::Model)?;
        model
            .set_cache_types(self.options.cache_types)
            .map_err(ServerError::Model)?;
        if mtp {
            // Loaded once: every slot's drafter reads the same head.
            model.load_mtp().map_err(ServerError::Model)?;
        }
        let pooling = self
            .options
            .pooling
            .or(model.pooling)
            .unwrap_or(oxibonsai_engine::Pooling::Mean);
        // A generation-only model asked for rank pooling is refused at load.
        let embedding_width = model.embedding_width(pooling).map_err(ServerError::Model)?;
        let ctx = match self.options.ctx {
            Some(0) => return Err(ServerError::ZeroCtx),
            Some(n) => n,
            None => model.config.default_ctx(),
        };
        let parallel = self.options.parallel.max(1);
        let n_ctx = ctx / parallel;
        if n_ctx == 0 {
            return Err(ServerError::CtxBelowSlots { ctx, parallel });
        }
        let n_vocab = model.config.n_vocab;
        let drafter = self.drafter(&text.tokenizer, n_vocab, n_ctx)?;
        let (tx, rx) = mpsc::channel();
        self.metrics.slots.set(parallel as u64);
        tracing::info!(backend = %model.backend.name(), n_ctx, parallel, "model loaded");
        let report = oxibonsai_engine::device_report(&model.backend, note);
        if report.device == "gpu" {
            eprintln!("device: {report}");
        }
        let _ = self.device.set(report.json());
        let tokenizer = Arc::clone(&text.tokenizer);
        let loaded = Loaded::new(
            text,
            n_ctx,
            n_vocab,
            tx,
            self.options.parse_special_in_content,
            EmbeddingSetup {
                pooling,
                width: embedding_width,
                rerank_template,
            },
        )?;
        let mut loaded = loaded;
        loaded.reasoning = self.options.reasoning;
        loaded.thinks &= self.options.split_reasoning;
        let _ = self.loaded.set(loaded);
        scheduler::run(
            model,
            &mut reload,
            tokenizer,
            SchedulerConfig {
                slots: parallel,
                ctx_per_slot: n_ctx,
                prefill_chunk: self.options.prefill_chunk,
                step_target: self.options.step_target,
                checkpoints: self.options.checkpoints,
                drafter,
                sleep: Arc::clone(&self.sleep),
            },
            rx,
            Arc::clone(&self.metrics),
            Arc::clone(&self.shutdown),
        )
        .map_err(ServerError::Engine)
    }

    /// The drafter the options ask for, loaded and checked against the model's vocabulary.
    fn drafter(
        &self,
        tokenizer: &oxibonsai_tokenizer::Tokenizer,
        n_vocab: usize,
        n_ctx: usize,
    ) -> Result<Option<scheduler::DraftSetup>, ServerError> {
        use oxibonsai_engine::speculative::DraftModel;
        use scheduler::Drafters;
        let Some(draft) = &self.options.draft else {
            return Ok(None);
        };
        let drafter = match &draft.source {
            DraftSource::Mtp => Drafters::Mtp { p_min: draft.p_min },
            DraftSource::PromptLookup(lookup) => Drafters::Fork(Box::new(*lookup)),
            DraftSource::Model(path) => {
                let file =
                    Arc::new(
                        GgufFile::open(path).map_err(|source| ServerError::ModelFile {
                            path: path.clone(),
                            source: Box::new(source),
                        })?,
                    );
                let draft_text = ModelText::read(&file)?;
                let backend =
                    CpuBackend::new(self.options.threads).map_err(ServerError::Backend)?;
                let model = Model::load(file, backend).map_err(ServerError::Model)?;
                Drafters::Fork(Box::new(
                    DraftModel::new(
                        model,
                        tokenizer,
                        n_vocab,
                        &draft_text.tokenizer,
                        n_ctx,
                        draft.p_min,
                    )
                    .map_err(ServerError::Model)?,
                ))
            }
        };
        let name = match &drafter {
            Drafters::Fork(d) => d.name(),
            Drafters::Mtp { .. } => "mtp",
        };
        tracing::info!(
            drafter = name,
            max = draft.limits.max,
            "speculative decoding"
        );
        Ok(Some((drafter, draft.limits)))
    }

    /// Stops the engine thread at its next step.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
    }
}

/// The HTTP application (every route, path normalization, auth, body limit).
pub fn app(state: Arc<AppState>) -> routes::App {
    routes::app(state)
}

/// Serves until ctrl-c (or SIGTERM), then shuts down within about 5 s (see [`serve_until`]).
pub async fn serve(options: ServerOptions, addr: SocketAddr) -> Result<(), ServerError> {
    serve_until(options, vec![addr], stop_signal()).await
}

/// [`serve`] on several addresses at once (llama-server's `--host A,B`). With port 0 the first
/// address picks a free port and the others use the same one.
pub async fn serve_on(options: ServerOptions, addrs: Vec<SocketAddr>) -> Result<(), ServerError> {
    serve_until(options, addrs, stop_signal()).await
}

/// Serves until `stop` resolves. Then: no new connections; running requests get [`SHUTDOWN_GRACE`] to finish, after which the engine stops
/// and the generations still running end with an error chunk or a 503; connections left after
/// [`SHUTDOWN_CLOSE`] more (a client that never finishes its request) are dropped.
async fn serve_until(
    options: ServerOptions,
    addrs: Vec<SocketAddr>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServerError> {
    let state = AppState::new(options);
    let engine = state.start_engine();
    let mut listeners = Vec::with_capacity(addrs.len());
    let mut port = None;
    for addr in addrs {
        let addr = match port {
            Some(p) if addr.port() == 0 => SocketAddr::new(addr.ip(), p),
            _ => addr,
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Listen { addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        port.get_or_insert(bound.port());
        eprintln!(
            "oxibonsai: serving '{}' on http://{} (OpenAI API under /v1)",
            state.model_id, bound
        );
        listeners.push(listener);
    }
    let limits = listen::Limits {
        header_timeout: state.options.header_timeout,
        max_connections: state.options.max_connections,
    };
    // A model that does not load (or an engine thread that stops on an error) stops the server,
    // as llama-server exits, rather than leaving it up answering 500 on every route.
    let failed = {
        let state = Arc::clone(&state);
        async move {
            while state.load_error.get().is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let stop = async {
        tokio::select! {
            _ = stop => {}
            _ = failed => {}
        }
    };
    let mut serving = listen::serve(listeners, app(Arc::clone(&state)), limits, stop).await;
    state.closing.store(true, Ordering::Relaxed);
    tracing::info!("shutting down: no new connections");
    if !serving.drained(SHUTDOWN_GRACE).await {
        tracing::info!("shutting down: cancelling the generations still running");
        state.stop();
    }
    serving.finish(SHUTDOWN_CLOSE).await;
    state.stop();
    // The engine stops at its next step boundary; a step is short, but the process must not
    // hang on it.
    let deadline = Instant::now() + Duration::from_millis(500);
    while !engine.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if engine.is_finished() {
        let _ = engine.join();
    }
    match (state.load_error.get(), state.loaded.get()) {
        (None, _) => Ok(()),
        (Some(text), None) => Err(ServerError::LoadFailed(text.clone())),
        (Some(text), Some(_)) => Err(ServerError::EngineStopped(text.clone())),
    }
}

/// SIGINT (ctrl-c) or, on Unix, SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{header, HeaderMap, Request, StatusCode};
    use tower::ServiceExt;

    use super::*;

    /// One request through the whole application: (status, headers, body text).
    async fn send(
        app: &routes::App,
        method: &str,
        path: &str,
        body: &str,
    ) -> (StatusCode, HeaderMap, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .expect("a valid request");
        let response = app.clone().oneshot(request).await.expect("infallible");
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .expect("the body");
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    }

    /// Reads one HTTP/1.1 response: (status, head in lower case, body); `None` at the end of
    /// the connection. Fails the test if neither comes within 30 s.
    async fn read_response<R: tokio::io::AsyncBufRead + Unpin>(
        reader: &mut R,
    ) -> Option<(u16, String, String)> {
        tokio::time::timeout(Duration::from_secs(30), read_response_now(reader))
            .await
            .expect("neither an answer nor the end of the connection within 30 s")
    }

    async fn read_response_now<R: tokio::io::AsyncBufRead + Unpin>(
        reader: &mut R,
    ) -> Option<(u16, String, String)> {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt};
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let status = head.split(' ').nth(1)?.parse().ok()?;
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(Some(0), |v| v.trim().parse().ok())?;
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.ok()?;
        Some((status, head, String::from_utf8_lossy(&body).into_owned()))
    }

    /// A server on a free port that never loads its model: every model route answers 503.
    async fn unloaded_server(api_key: &str, max_body_bytes: usize) -> std::net::SocketAddr {
        let mut options = ServerOptions::new(PathBuf::from("never-loaded.gguf"));
        options.parallel = 1;
        options.max_queue = 1;
        options.api_key = Some(api_key.to_owned());
        options.threads = 1;
        options.max_body_bytes = max_body_bytes;
        let state = AppState::new(options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let addr = listener.local_addr().expect("its address");
        let limits = listen::Limits {
            header_timeout: Duration::from_secs(10),
            max_connections: 16,
        };
        tokio::spawn(listen::serve(
            vec![listener],
            app(state),
            limits,
            std::future::pending(),
        ));
        addr
    }

    /// Answers decided before the body is read (413 from `Content-Length`, 401 from the
    /// headers) leave the connection usable: pipelined requests after them are answered on it.
    #[tokio::test]
    async fn early_answers_keep_the_connection() {
        use tokio::io::{AsyncWriteExt, BufReader};
        let limit = 1 << 20;
        let addr = unloaded_server("k", limit).await;
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let (read, mut write) = stream.into_split();
        let writer = tokio::spawn(async move {
            let chat =
                "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\n";
            // Declared too large.
            let big = 3 * limit;
            let head = format!("{chat}content-length: {big}\r\n\r\n");
            write.write_all(head.as_bytes()).await?;
            write.write_all(&vec![b'x'; big]).await?;
            // Chunked, found too large while reading.
            write
                .write_all(format!("{chat}transfer-encoding: chunked\r\n\r\n").as_bytes())
                .await?;
            let chunk = vec![b'y'; 64 << 10];
            for _ in 0..40 {
                write
                    .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .await?;
                write.write_all(&chunk).await?;
                write.write_all(b"\r\n").await?;
            }
            write.write_all(b"0\r\n\r\n").await?;
            // A wrong key with a body within the limit.
            let body = vec![b'z'; limit / 2];
            let head = format!(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer no\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            write.write_all(head.as_bytes()).await?;
            write.write_all(&body).await?;
            write
                .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
                .await?;
            Ok::<_, std::io::Error>(write)
        });
        let mut reader = BufReader::new(read);
        let mut answers = Vec::new();
        for _ in 0..4 {
            match read_response(&mut reader).await {
                Some(answer) => answers.push(answer),
                None => panic!("the server closed the connection after {answers:?}"),
            }
        }
        let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
        assert_eq!(statuses, [413, 413, 401, 503], "{answers:?}");
        assert!(answers[0].2.contains("request_too_large"), "{answers:?}");
        assert_eq!(answers[3].2, r#"{"status":"loading"}"#, "{answers:?}");
        for answer in &answers {
            assert!(!answer.1.contains("connection: close"), "{answer:?}");
        }
        writer
            .await
            .expect("the writer")
            .expect("every request sent");
    }

    /// A body larger than the server reads and drops is not read: the 413 says the connection
    /// ends, and it does.
    #[tokio::test]
    async fn a_body_past_the_drain_allowance_closes_the_connection() {
        use tokio::io::{AsyncWriteExt, BufReader};
        let limit = 1 << 20;
        let addr = unloaded_server("k", limit).await;
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let declared = limit + routes::body::DRAIN_BYTES + 1;
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\ncontent-length: {declared}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("sent");
        let mut reader = BufReader::new(stream);
        let answer = read_response(&mut reader).await.expect("an answer");
        assert_eq!(answer.0, 413, "{answer:?}");
        assert!(answer.1.contains("connection: close"), "{answer:?}");
        assert_eq!(read_response(&mut reader).await, None);
    }

    #[tokio::test]
    async fn requests_get_503_while_the_model_loads_then_200() {
        let mut options = ServerOptions::new(oxibonsai_testkit::golden("models/qwen3-q1_0.gguf"));
        options.parallel = 1;
        options.threads = 2;
        let state = AppState::new(options);
        // The load waits until the test opens the gate.
        let (open, gate) = mpsc::channel::<()>();
        let engine = state.start_engine_after(move || {
            let _ = gate.recv();
        });
        let app = app(Arc::clone(&state));

        let health = send(&app, "GET", "/health", "").await;
        assert_eq!(health.0, StatusCode::SERVICE_UNAVAILABLE, "{health:?}");
        assert_eq!(health.2, r#"{"status":"loading"}"#, "{health:?}");
        let chat = send(
            &app,
            "POST",
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
        )
        .await;
        assert_eq!(chat.0, StatusCode::SERVICE_UNAVAILABLE, "{chat:?}");
        assert!(chat.2.contains("\"code\":\"model_loading\""), "{chat:?}");
        assert_eq!(chat.1[header::RETRY_AFTER], "1", "{chat:?}");

        open.send(()).expect("the engine thread waits at the gate");
        let deadline = Instant::now() + Duration::from_secs(60);
        while send(&app, "GET", "/health", "").await.0 != StatusCode::OK {
            assert!(
                Instant::now() < deadline,
                "never loaded: {:?}",
                state.load_error.get()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        state.stop();
        engine.join().expect("the engine thread ends");
    }
}
