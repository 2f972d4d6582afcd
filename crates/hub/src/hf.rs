//! The Hugging Face Hub as a model source (`hf:ORG/NAME[@REVISION][/FILE]`), speaking the Hub's
//! own protocol as `huggingface_hub` does and sharing its cache:
//!
//! 1. `HEAD {endpoint}/{repo}/resolve/{revision}/{file}`, redirects not followed (except relative
//!    ones, which a renamed repository answers with): the answer carries the commit
//!    (`X-Repo-Commit`), the etag naming the blob (`X-Linked-Etag` for LFS files — their sha256 —
//!    else `ETag`), the size (`X-Linked-Size`) and, for LFS files, a redirect to the CDN.
//! 2. The blob, unless cached, is fetched from there, resumed from a previous partial download.
//! 3. The snapshot link and the revision's ref are written, so offline runs find the file.
//!
//! The token goes only to the Hub's own host, never to the CDN (its URLs are pre-signed).

mod cache;
mod download;

use std::io::Read;
use std::path::PathBuf;

use serde::Deserialize;

use crate::http::{Answer, Client, Method};
use crate::{FetchOptions, HfSpec, HubError};
use cache::{is_commit_hash, is_safe_name, RepoCache};
use download::{download_blob, BlobRequest};

/// Redirects within the Hub (renamed repositories) followed before giving up.
const MAX_RELATIVE_REDIRECTS: usize = 5;
/// A repository listing is a few kilobytes per thousand files; more than this is not a listing.
const MAX_LISTING_BYTES: u64 = 32 * 1024 * 1024;

/// The local path of the file `spec` names (a link in the Hugging Face cache's snapshot folder),
/// downloading it first unless it is cached. Without a file in the spec, the repository must
/// hold exactly one `.gguf` ([`HubError::HfChooseFile`] lists them otherwise).
pub fn fetch_hf(spec: &HfSpec, opts: &FetchOptions) -> Result<PathBuf, HubError> {
    let root = opts.hf_cache_root()?;
    let cache = RepoCache::new(&root, &spec.repo);
    let revision = spec.revision();
    if opts.offline {
        return from_cache(&cache, spec, &root);
    }
    // A commit pins the content, so a file cached under it needs no question to the Hub.
    if let (true, Some(file)) = (is_commit_hash(revision), &spec.file) {
        if let Some(path) = cache.cached_file(revision, file) {
            return Ok(path);
        }
    }
    let hub = Hub {
        client: Client::new(),
        endpoint: opts.hf_endpoint(),
        token: opts.hf_token.clone(),
    };
    let online = || -> Result<PathBuf, HubError> {
        let file = match &spec.file {
            Some(file) => file.clone(),
            None => hub.only_gguf(&spec.repo, revision)?,
        };
        let meta = hub.metadata(&spec.repo, revision, &file)?;
        if !cache.blob(&meta.etag).is_file() {
            let headers = hub.auth_headers(&meta.download_url);
            let request = BlobRequest {
                file: &file,
                url: &meta.download_url,
                headers: &headers,
                etag: &meta.etag,
                size: meta.size,
                sha256: meta.sha256.as_deref(),
            };
            let status_error = |answer: &Answer| hub.status_error(answer, spec, Some(&file));
            download_blob(&hub.client, &cache, &request, opts.progress, &status_error)?;
        }
        let path = cache.link_snapshot(&meta.commit, &file, &meta.etag)?;
        cache.write_ref(revision, &meta.commit)?;
        Ok(path)
    };
    match online() {
        // The Hub out of reach is no reason to refuse a model that is already here.
        Err(err @ HubError::Network { .. }) => match from_cache(&cache, spec, &root) {
            Ok(path) => {
                tracing::warn!("{err}; using the cached {}", path.display());
                Ok(path)
            }
            Err(_) => Err(err),
        },
        other => other,
    }
}

/// The cached file for `spec`, or why there is none.
fn from_cache(
    cache: &RepoCache,
    spec: &HfSpec,
    root: &std::path::Path,
) -> Result<PathBuf, HubError> {
    let revision = spec.revision();
    let offline = || HubError::Offline {
        spec: spec.to_string(),
        cache: root.to_path_buf(),
    };
    match &spec.file {
        Some(file) => cache.cached_file(revision, file).ok_or_else(offline),
        None => match cache.cached_ggufs(revision).as_slice() {
            [] => Err(offline()),
            [file] => cache.cached_file(revision, file).ok_or_else(offline),
            files => Err(HubError::HfChooseFile {
                repo: spec.repo.clone(),
                revision: revision.to_owned(),
                files: files.to_vec(),
            }),
        },
    }
}

struct Hub {
    client: Client,
    /// Without a trailing slash.
    endpoint: String,
    token: Option<String>,
}

/// What the resolve endpoint says about one file.
struct FileMeta {
    commit: String,
    etag: String,
    size: Option<u64>,
    sha256: Option<String>,
    download_url: String,
}

#[derive(Deserialize)]
struct ModelInfo {
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
}

impl Hub {
    /// `{endpoint}/{segments…}`, each segment percent-encoded (a revision such as `refs/pr/1`
    /// is one segment).
    fn url(&self, segments: &[&str]) -> Result<String, HubError> {
        let bad = || HubError::HfBadAnswer {
            url: self.endpoint.clone(),
            reason: "the Hub endpoint is not an http(s) URL".to_owned(),
        };
        let mut url = url::Url::parse(&self.endpoint).map_err(|_| bad())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad());
        }
        url.path_segments_mut()
            .map_err(|_| bad())?
            .pop_if_empty()
            .extend(segments);
        Ok(url.into())
    }

    /// `Authorization` for URLs on the Hub's own host; nothing for other hosts.
    fn auth_headers(&self, url: &str) -> Vec<(&'static str, String)> {
        let Some(token) = &self.token else {
            return Vec::new();
        };
        let origin = |u: &str| url::Url::parse(u).ok().map(|u| u.origin());
        match (origin(url), origin(&self.endpoint)) {
            (Some(a), Some(b)) if a == b => vec![("Authorization", format!("Bearer {token}"))],
            _ => Vec::new(),
        }
    }

    /// The one `.gguf` of the repository at `revision`, from `GET /api/models/{repo}`.
    fn only_gguf(&self, repo: &str, revision: &str) -> Result<String, HubError> {
        let (org, name) = repo.split_once('/').unwrap_or((repo, ""));
        let mut segments = vec!["api", "models", org, name];
        if revision != "main" {
            segments.extend(["revision", revision]);
        }
        let url = self.url(&segments)?;
        let answer = self
            .client
            .call(Method::Get, &url, &self.auth_headers(&url), true)?;
        let spec = HfSpec {
            repo: repo.to_owned(),
            revision: Some(revision.to_owned()),
            file: None,
        };
        if answer.status != 200 {
            return Err(self.status_error(&answer, &spec, None));
        }
        let mut text = String::new();
        answer
            .body
            .take(MAX_LISTING_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| HubError::Network {
                url: url.clone(),
                error: Box::new(e),
            })?;
        let info: ModelInfo = serde_json::from_str(&text).map_err(|e| HubError::HfBadAnswer {
            url: url.clone(),
            reason: format!("the repository listing is not the JSON the Hub sends: {e}"),
        })?;
        let mut files: Vec<String> = info
            .siblings
            .into_iter()
            .map(|s| s.rfilename)
            .filter(|f| f.to_ascii_lowercase().ends_with(".gguf"))
            .collect();
        files.sort();
        match files.as_slice() {
            [file] => Ok(file.clone()),
            _ => Err(HubError::HfChooseFile {
                repo: repo.to_owned(),
                revision: revision.to_owned(),
                files,
            }),
        }
    }

    fn metadata(&self, repo: &str, revision: &str, file: &str) -> Result<FileMeta, HubError> {
        let (org, name) = repo.split_once('/').unwrap_or((repo, ""));
        let mut segments = vec![org, name, "resolve", revision];
        segments.extend(file.split('/'));
        let mut url = self.url(&segments)?;
        let spec = HfSpec {
            repo: repo.to_owned(),
            revision: Some(revision.to_owned()),
            file: Some(file.to_owned()),
        };
        for _ in 0..=MAX_RELATIVE_REDIRECTS {
            let answer = self
                .client
                .call(Method::Head, &url, &self.auth_headers(&url), false)?;
            match answer.status {
                200..=299 => return file_meta(&answer, &url, None),
                300..=399 => {
                    let location =
                        answer
                            .header("location")
                            .ok_or_else(|| HubError::HfBadAnswer {
                                url: url.clone(),
                                reason: format!("HTTP {} without a Location header", answer.status),
                            })?;
                    let target = url::Url::parse(&url)
                        .and_then(|base| base.join(&location))
                        .map_err(|e| HubError::HfBadAnswer {
                            url: url.clone(),
                            reason: format!("unusable Location {location:?}: {e}"),
                        })?;
                    // A redirect carrying the file's metadata points at the bytes; one without
                    // it moves us within the Hub (a renamed repository).
                    if answer.header("x-repo-commit").is_some() {
                        return file_meta(&answer, &url, Some(target.into()));
                    }
                    url = target.into();
                }
                _ => return Err(self.status_error(&answer, &spec, Some(file))),
            }
        }
        Err(HubError::HfBadAnswer {
            url,
            reason: format!("more than {MAX_RELATIVE_REDIRECTS} redirects"),
        })
    }

    /// The Hub's refusals, explained with what the user can do about them.
    fn status_error(&self, answer: &Answer, spec: &HfSpec, file: Option<&str>) -> HubError {
        let url = answer.final_url.clone();
        let repo = &spec.repo;
        let revision = spec.revision();
        match answer.status {
            401 | 403 => HubError::HfAccessDenied {
                repo: repo.clone(),
                url,
                status: answer.status,
                token_sent: self.token.is_some(),
            },
            404 => {
                let code = answer.header("x-error-code").unwrap_or_default();
                let what = match (code.as_str(), file) {
                    ("RepoNotFound", _) => format!("repository {repo} not found"),
                    ("RevisionNotFound", _) => {
                        format!("revision {revision:?} not found in {repo}")
                    }
                    (_, Some(file)) => format!(
                        "file {file:?} not found in {repo} at revision {revision:?} \
                         (or the repository does not exist)"
                    ),
                    (_, None) => {
                        format!("repository {repo} (revision {revision:?}) not found")
                    }
                };
                HubError::HfNotFound { url, what }
            }
            status => HubError::Http { url, status },
        }
    }
}

/// Reads the metadata headers of a resolve answer; `location` is where the bytes are when the
/// answer was a redirect.
fn file_meta(answer: &Answer, url: &str, location: Option<String>) -> Result<FileMeta, HubError> {
    let bad = |reason: String| HubError::HfBadAnswer {
        url: url.to_owned(),
        reason,
    };
    let commit = answer
        .header("x-repo-commit")
        .ok_or_else(|| bad("the answer has no X-Repo-Commit header".to_owned()))?;
    if !is_safe_name(&commit) {
        return Err(bad(format!(
            "X-Repo-Commit {commit:?} is not a commit hash"
        )));
    }
    let etag = answer
        .header("x-linked-etag")
        .or_else(|| answer.header("etag"))
        .map(|tag| normalize_etag(&tag))
        .ok_or_else(|| bad("the answer has neither X-Linked-Etag nor ETag".to_owned()))?;
    if !is_safe_name(&etag) {
        return Err(bad(format!("the etag {etag:?} is not a hash")));
    }
    let size_header = match location {
        Some(_) => answer.header("x-linked-size"),
        None => answer
            .header("x-linked-size")
            .or_else(|| answer.header("content-length")),
    };
    let size = match size_header {
        None => None,
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|_| bad(format!("the size {text:?} is not a number")))?,
        ),
    };
    // An LFS file's etag is its sha256; other files carry a git object id, which is no sha256.
    let sha256 = (etag.len() == 64 && etag.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| etag.to_ascii_lowercase());
    Ok(FileMeta {
        commit,
        etag,
        size,
        sha256,
        download_url: location.unwrap_or_else(|| url.to_owned()),
    })
}

/// `W/"abc"` → `abc`: the weak marker and the quotes are not part of the hash.
fn normalize_etag(tag: &str) -> String {
    let tag = tag.trim();
    let tag = tag.strip_prefix("W/").unwrap_or(tag);
    tag.trim_matches('"').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_lose_quotes_and_weak_markers() {
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag(" abc "), "abc");
    }

    #[test]
    fn urls_encode_each_segment_and_keep_a_mirror_prefix() {
        let hub = Hub {
            client: Client::new(),
            endpoint: "https://mirror.example/hf".into(),
            token: Some("t".into()),
        };
        assert_eq!(
            hub.url(&["o", "n", "resolve", "refs/pr/1", "a b.gguf"])
                .unwrap(),
            "https://mirror.example/hf/o/n/resolve/refs%2Fpr%2F1/a%20b.gguf"
        );
        assert_eq!(
            hub.auth_headers("https://mirror.example/hf/o/n"),
            [("Authorization", "Bearer t".to_owned())]
        );
        assert!(hub.auth_headers("https://cdn.example/x").is_empty());
        let bad = Hub {
            endpoint: "mailto:x".into(),
            ..hub
        };
        assert!(matches!(bad.url(&["o"]), Err(HubError::HfBadAnswer { .. })));
    }
}
