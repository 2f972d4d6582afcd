//! `oxibonsai devices [--json]`: the GPU adapters this build finds, and which of them
//! `--device auto` may take (hardware ones only: a software one such as lavapipe is slower than
//! the CPU backend). What a loaded model uses is in `bench`'s report and on stderr at load.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;

use super::print;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print one JSON object: `gpu_support`, `adapters` (`name`, `auto`).
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let adapters = oxibonsai_engine::gpu_adapters();
    if args.json {
        let list: Vec<_> = adapters
            .iter()
            .flatten()
            .map(|(name, auto)| json!({"name": name, "auto": auto}))
            .collect();
        print(&(json!({"gpu_support": adapters.is_some(), "adapters": list}).to_string() + "\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = match adapters {
        None => "built without GPU support (cargo feature `gpu`): the CPU only\n".to_owned(),
        Some(list) if list.is_empty() => {
            "no GPU adapter found (a Vulkan driver, e.g. Debian's mesa-vulkan-drivers, \
             provides one); --device auto runs on the CPU\n"
                .to_owned()
        }
        Some(list) => list
            .iter()
            .map(|(name, auto)| {
                let note = if *auto {
                    "hardware: --device auto may use it"
                } else {
                    "not a hardware GPU: only --device gpu uses it"
                };
                format!("{name}  ({note})\n")
            })
            .collect(),
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}
