//! A small HTTP/1.1 server on 127.0.0.1 that imitates the Hugging Face Hub's endpoints, as the
//! Hub answers them: `HEAD/GET /{repo}/resolve/{revision}/{file}` (an LFS file redirects with
//! 302 to a CDN host, carrying `X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`; a small file
//! answers 200 with a git `ETag`), the CDN with `Range` support, `GET /api/models/{repo}` with its
//! `siblings`, 401/403 for gated repositories, and 404 with the Hub's `X-Error-Code`.
//! Shared by the hub crate's tests and the CLI's (`#[path]`).

#![allow(dead_code)] // each test file uses a different part

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[path = "../support/mod.rs"]
mod support;
use support::Listener;
pub use support::{fake_gguf, sha256_hex};

pub struct HubFile {
    pub path: String,
    pub content: Vec<u8>,
    /// LFS files redirect to the CDN and announce their sha256 as etag.
    pub lfs: bool,
    /// The sha256 the Hub announces; `None` announces the true one.
    pub announced_sha256: Option<String>,
}

impl HubFile {
    pub fn lfs(path: &str, content: Vec<u8>) -> HubFile {
        HubFile {
            path: path.to_owned(),
            content,
            lfs: true,
            announced_sha256: None,
        }
    }

    pub fn small(path: &str, content: Vec<u8>) -> HubFile {
        HubFile {
            lfs: false,
            ..HubFile::lfs(path, content)
        }
    }

    pub fn sha256(&self) -> String {
        self.announced_sha256
            .clone()
            .unwrap_or_else(|| sha256_hex(&self.content))
    }
}

pub struct HubRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<HubFile>,
    /// A gated repository: files need this token.
    pub token: Option<String>,
    /// The repository's former id, which the Hub redirects (relatively) to the new one.
    pub renamed_from: Option<String>,
}

impl HubRepo {
    pub fn new(id: &str, files: Vec<HubFile>) -> HubRepo {
        HubRepo {
            id: id.to_owned(),
            commit: sha256_hex(id.as_bytes())[..40].to_owned(),
            files,
            token: None,
            renamed_from: None,
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

pub struct FakeHub {
    /// `http://127.0.0.1:PORT`, the Hub.
    pub base: String,
    /// `http://localhost:PORT`: the same server under another host name, playing the CDN.
    pub cdn: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    cut_after: Arc<Mutex<Option<usize>>>,
    ignore_ranges: Arc<AtomicBool>,
    listener: Listener,
}

struct State {
    repos: Vec<HubRepo>,
    cdn: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    cut_after: Arc<Mutex<Option<usize>>>,
    ignore_ranges: Arc<AtomicBool>,
}

impl FakeHub {
    pub fn start(repos: Vec<HubRepo>) -> FakeHub {
        let listener = Listener::bind();
        let port = listener.local_addr().unwrap().port();
        let base = format!("http://127.0.0.1:{port}");
        let cdn = format!("http://localhost:{port}");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let cut_after = Arc::new(Mutex::new(None));
        let ignore_ranges = Arc::new(AtomicBool::new(false));
        let state = State {
            repos,
            cdn: cdn.clone(),
            seen: seen.clone(),
            cut_after: cut_after.clone(),
            ignore_ranges: ignore_ranges.clone(),
        };
        FakeHub {
            base,
            cdn,
            seen,
            cut_after,
            ignore_ranges,
            listener: Listener::serve(listener, move |stream| serve(stream, &state)),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The GETs that reached the CDN, i.e. the downloads.
    pub fn downloads(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "GET" && s.path.starts_with("/cdn/"))
            .collect()
    }

    /// The next CDN download sends its headers and `bytes` bytes of the body, then hangs up.
    pub fn cut_next_download_after(&self, bytes: usize) {
        *self.cut_after.lock().unwrap() = Some(bytes);
    }

    /// From now on the CDN answers every request with the whole file (200), as a server
    /// without range support does.
    pub fn ignore_ranges(&self) {
        self.ignore_ranges.store(true, Ordering::SeqCst);
    }

    /// Stops listening: later connections are refused.
    pub fn stop(&mut self) {
        self.listener.stop();
    }
}

struct Reply {
    status: &'static str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this much of the body, then hang up.
    cut: Option<usize>,
}

fn reply(status: &'static str) -> Reply {
    Reply {
        status,
        headers: Vec::new(),
        body: Vec::new(),
        cut: None,
    }
}

fn error(status: &'static str, code: &str) -> Reply {
    let mut r = reply(status);
    r.headers.push(("X-Error-Code".into(), code.into()));
    r
}

fn serve(stream: TcpStream, state: &State) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let mut words = request_line.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let path = words.next().unwrap_or("").to_owned();
    let seen = Seen {
        method: method.clone(),
        path: path.clone(),
        range: headers.get("range").cloned(),
        authorization: headers.get("authorization").cloned(),
    };
    state.seen.lock().unwrap().push(seen.clone());
    let reply = route(state, &seen);
    let mut out = std::io::BufWriter::new(stream);
    write!(out, "HTTP/1.1 {}\r\n", reply.status)?;
    for (name, value) in &reply.headers {
        write!(out, "{name}: {value}\r\n")?;
    }
    if !reply.headers.iter().any(|(n, _)| n == "Content-Length") {
        write!(out, "Content-Length: {}\r\n", reply.body.len())?;
    }
    write!(out, "Connection: close\r\n\r\n")?;
    if method != "HEAD" {
        let end = reply.cut.unwrap_or(reply.body.len()).min(reply.body.len());
        out.write_all(&reply.body[..end])?;
    }
    out.flush()?;
    // Dropping the stream closes the connection, mid-body when the reply was cut.
    Ok(())
}

fn decode(segment: &str) -> String {
    segment.replace("%2F", "/").replace("%20", " ")
}

fn route(state: &State, seen: &Seen) -> Reply {
    let segments: Vec<&str> = seen.path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["cdn", sha] => cdn(state, seen, sha),
        ["api", "models", org, name, rest @ ..] => {
            let Some(repo) = find_repo(state, org, name) else {
                return error("404 Not Found", "RepoNotFound");
            };
            if let ["revision", revision] = rest {
                if !known_revision(repo, &decode(revision)) {
                    return error("404 Not Found", "RevisionNotFound");
                }
            }
            let siblings: Vec<String> = repo
                .files
                .iter()
                .map(|f| format!("{{\"rfilename\": \"{}\"}}", f.path))
                .collect();
            let mut r = reply("200 OK");
            r.headers
                .push(("Content-Type".into(), "application/json".into()));
            r.body = format!(
                "{{\"id\": \"{}\", \"sha\": \"{}\", \"siblings\": [{}]}}",
                repo.id,
                repo.commit,
                siblings.join(", ")
            )
            .into_bytes();
            r
        }
        [org, name, "resolve", revision, file @ ..] if !file.is_empty() => {
            resolve(state, seen, org, name, &decode(revision), &file.join("/"))
        }
        _ => reply("404 Not Found"),
    }
}

fn find_repo<'a>(state: &'a State, org: &str, name: &str) -> Option<&'a HubRepo> {
    let id = format!("{org}/{name}");
    state.repos.iter().find(|r| r.id == id)
}

fn known_revision(repo: &HubRepo, revision: &str) -> bool {
    revision == "main" || revision == repo.commit
}

fn resolve(state: &State, seen: &Seen, org: &str, name: &str, revision: &str, file: &str) -> Reply {
    let old_id = format!("{org}/{name}");
    if let Some(renamed) = state
        .repos
        .iter()
        .find(|r| r.renamed_from.as_deref() == Some(old_id.as_str()))
    {
        let mut r = reply("307 Temporary Redirect");
        let rest = seen.path.trim_start_matches('/');
        let rest = &rest[old_id.len()..];
        r.headers
            .push(("Location".into(), format!("/{}{rest}", renamed.id)));
        return r;
    }
    let Some(repo) = find_repo(state, org, name) else {
        return error("404 Not Found", "RepoNotFound");
    };
    if let Some(token) = &repo.token {
        match &seen.authorization {
            None => return error("401 Unauthorized", "GatedRepo"),
            Some(auth) if *auth != format!("Bearer {token}") => {
                return error("403 Forbidden", "GatedRepo")
            }
            Some(_) => {}
        }
    }
    if !known_revision(repo, revision) {
        return error("404 Not Found", "RevisionNotFound");
    }
    let file = decode(file);
    let Some(entry) = repo.files.iter().find(|f| f.path == file) else {
        return error("404 Not Found", "EntryNotFound");
    };
    let git_oid = sha256_hex(&entry.content)[..40].to_owned();
    let mut r;
    if entry.lfs {
        r = reply("302 Found");
        let sha = entry.sha256();
        r.headers.extend([
            (
                "Location".into(),
                format!("{}/cdn/{}", state.cdn, sha256_hex(&entry.content)),
            ),
            ("X-Linked-Etag".into(), format!("\"{sha}\"")),
            ("X-Linked-Size".into(), entry.content.len().to_string()),
            ("ETag".into(), format!("W/\"{git_oid}\"")),
        ]);
    } else {
        r = reply("200 OK");
        r.headers.push(("ETag".into(), format!("\"{git_oid}\"")));
        r.body = entry.content.clone();
    }
    r.headers
        .push(("X-Repo-Commit".into(), repo.commit.clone()));
    r
}

fn cdn(state: &State, seen: &Seen, sha: &str) -> Reply {
    let Some(file) = state
        .repos
        .iter()
        .flat_map(|r| &r.files)
        .find(|f| sha256_hex(&f.content) == sha)
    else {
        return reply("404 Not Found");
    };
    let len = file.content.len();
    let start = seen
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok())
        .filter(|_| !state.ignore_ranges.load(Ordering::SeqCst));
    let mut r = match start {
        Some(start) if start >= len => {
            let mut r = reply("416 Range Not Satisfiable");
            r.headers
                .push(("Content-Range".into(), format!("bytes */{len}")));
            return r;
        }
        Some(start) => {
            let mut r = reply("206 Partial Content");
            r.headers.push((
                "Content-Range".into(),
                format!("bytes {start}-{}/{len}", len - 1),
            ));
            r.body = file.content[start..].to_vec();
            r
        }
        None => {
            let mut r = reply("200 OK");
            r.body = file.content.clone();
            r
        }
    };
    r.headers
        .push(("Content-Type".into(), "application/octet-stream".into()));
    r.cut = state.cut_after.lock().unwrap().take();
    r
}
