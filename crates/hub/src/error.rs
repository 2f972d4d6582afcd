//! Every way getting a model can fail, each naming what was asked for and what was found.

use std::path::PathBuf;

/// How many versions a [`HubError::VersionNotFound`] message spells out before summarising.
const VERSIONS_SHOWN: usize = 40;

/// An error while resolving a model spec, talking to the index, or filling the cache.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The spec is neither an existing file, a `pypi:` or `hf:` spec nor a known alias.
    #[error(
        "model file {spec:?} does not exist; accepted forms: a path to a .gguf file, \
         `pypi:PACKAGE==VERSION[/FILE.gguf]`, `hf:ORG/NAME[@REVISION]/FILE.gguf`, \
         or an alias ({aliases})",
        aliases = crate::spec::alias_names().join(", ")
    )]
    NoSuchModel { spec: String },

    /// The spec names something that exists but is not a file (e.g. a folder).
    #[error("{} is not a file (a model is one .gguf file)", path.display())]
    NotAFile { path: PathBuf },

    /// A `pypi:` spec that does not have the expected shape.
    #[error("bad model spec {spec:?}: {reason} (expected `pypi:PACKAGE==VERSION[/FILE.gguf]`)")]
    BadSpec { spec: String, reason: String },

    /// An `hf:` spec that does not have the expected shape.
    #[error("bad model spec {spec:?}: {reason} (expected `hf:ORG/NAME[@REVISION][/FILE.gguf]`)")]
    BadHfSpec { spec: String, reason: String },

    /// The index has no page for the package (HTTP 404).
    #[error("package {package:?} not found on the index ({url} answered 404)")]
    PackageNotFound { package: String, url: String },

    /// The package exists but lists no file of the wanted version.
    #[error(
        "package {package:?} has no version {version:?} on the index; versions listed: {}",
        list_versions(available, *more)
    )]
    VersionNotFound {
        package: String,
        version: String,
        /// Versions seen in the listing, newest first (capped; `more` counts the files of the
        /// versions left out).
        available: Vec<String>,
        more: usize,
    },

    /// The version exists but only as files that are not wheels (e.g. an sdist).
    #[error("package {package:?} version {version:?} has no wheel on the index; files listed: {}", files.join(", "))]
    NoWheel {
        package: String,
        version: String,
        files: Vec<String>,
    },

    /// The wheel does not hold the requested member, or holds no single GGUF to default to.
    #[error("{wheel} {reason}; .gguf members: [{}]", members.join(", "))]
    MemberNotFound {
        wheel: String,
        reason: String,
        members: Vec<String>,
    },

    /// An HTTP request answered with a status other than success.
    #[error("HTTP {status} from {url}")]
    Http { url: String, status: u16 },

    /// The request did not get an answer (DNS, connection, TLS, a broken transfer).
    /// (The cause is shown in the message, so it is not also returned by `source()`: a chain
    /// printed with `{:#}` would say it twice. The same for `Io`.)
    #[error("request to {url} failed: {error}")]
    Network {
        url: String,
        error: Box<dyn std::error::Error + Send + Sync>,
    },

    /// HTTPS was needed but the operating system's certificate store gave no usable root.
    #[error(
        "no trusted root certificates found in the operating system's store \
         (set SSL_CERT_FILE to a PEM bundle): {reason}"
    )]
    NoRootCertificates { reason: String },

    /// The index page could not be understood.
    #[error("bad index page {url}: {reason}")]
    BadIndex { url: String, reason: String },

    /// A downloaded file does not hash to what the index or the Hub listed.
    #[error(
        "checksum mismatch for {file}: its source lists sha256 {expected}, the download hashes \
         to {found} (the download was deleted; run again to fetch it anew)"
    )]
    ChecksumMismatch {
        file: String,
        expected: String,
        found: String,
    },

    /// Offline mode was asked for and the model is not in the cache.
    #[error(
        "{spec} is not in the cache {} and offline mode forbids downloading it \
         (unset OXIBONSAI_OFFLINE and HF_HUB_OFFLINE, or drop --offline, to fetch it)",
        cache.display()
    )]
    Offline { spec: String, cache: PathBuf },

    /// The Hub refused access (HTTP 401 or 403): a gated or private repository, or a token
    /// without access to it. The Hub also answers 401 for a repository that does not exist
    /// when no token is sent, so the message says that too.
    #[error(
        "{url} answered HTTP {status}: {repo} is gated or private{absent} — {hint}",
        absent = if *token_sent { "" } else { ", or does not exist" },
        hint = if *token_sent {
            "the token was refused or has no access to it (for a gated repository, accept its \
             conditions on its Hub page with the token's account)"
        } else {
            "set HF_TOKEN (or pass --token) to a token with access to it"
        }
    )]
    HfAccessDenied {
        repo: String,
        url: String,
        status: u16,
        token_sent: bool,
    },

    /// The Hub answered 404: the repository, the revision or the file does not exist.
    #[error("{url} answered HTTP 404: {what} (check the spelling; names on the Hub are ORG/NAME)")]
    HfNotFound { url: String, what: String },

    /// No file was named and the repository does not hold exactly one `.gguf`.
    #[error(
        "{repo} at {revision} holds {} .gguf files; name one (e.g. hf:{repo}/FILE.gguf): {}",
        files.len(),
        if files.is_empty() { "none".to_owned() } else { files.join(", ") }
    )]
    HfChooseFile {
        repo: String,
        revision: String,
        files: Vec<String>,
    },

    /// The Hub's answer lacks what every answer of a real Hub carries (e.g. `X-Repo-Commit`).
    #[error("{url}: {reason} (is HF_ENDPOINT a Hugging Face Hub?)")]
    HfBadAnswer { url: String, reason: String },

    /// A download ended before its announced size, or went past it.
    #[error("download of {file} from {url}: {reason}")]
    BadDownload {
        file: String,
        url: String,
        reason: String,
    },

    /// A downloaded wheel is not a readable zip, or a member is unsafe or corrupt.
    #[error("bad wheel {wheel}: {reason}")]
    BadWheel { wheel: String, reason: String },

    /// No cache folder could be chosen (no `OXIBONSAI_CACHE`, `XDG_CACHE_HOME` or `HOME`).
    #[error("no cache folder: set OXIBONSAI_CACHE (or XDG_CACHE_HOME / HOME)")]
    NoCacheDir,

    /// A file-system operation failed.
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl HubError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
        let path = path.into();
        move |error| HubError::Io { path, error }
    }
}

fn list_versions(available: &[String], more: usize) -> String {
    if available.is_empty() {
        return "none".to_owned();
    }
    let shown = &available[..available.len().min(VERSIONS_SHOWN)];
    let left = available.len() - shown.len() + more;
    let mut text = shown.join(", ");
    if left > 0 {
        text.push_str(&format!(" … and {left} more"));
    }
    text
}
