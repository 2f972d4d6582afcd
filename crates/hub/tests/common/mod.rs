//! A canned HTTP/1.1 server on 127.0.0.1 imitating a package index, and wheels built on the spot.

#![allow(dead_code)] // each test file uses a different part

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Cursor, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[path = "../support/mod.rs"]
mod support;
use support::Listener;
pub use support::{fake_gguf, sha256_hex};

/// Writes a generated body.
pub type BodyWriter = Box<dyn Fn(&mut dyn Write) -> std::io::Result<()> + Send + Sync>;

/// What the server answers for one path.
pub enum Reply {
    Body {
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// A body produced while it is sent, for pages too large to hold.
    Generated {
        content_type: &'static str,
        length: u64,
        write: BodyWriter,
    },
    Status(u16),
    Redirect(String),
}

pub fn html(body: String) -> Reply {
    Reply::Body {
        content_type: "text/html; charset=utf-8",
        body: body.into_bytes(),
    }
}

pub fn json(body: String) -> Reply {
    Reply::Body {
        content_type: "application/vnd.pypi.simple.v1+json",
        body: body.into_bytes(),
    }
}

pub fn bytes(body: Vec<u8>) -> Reply {
    Reply::Body {
        content_type: "application/octet-stream",
        body,
    }
}

pub struct Server {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// `http://localhost:PORT`: the same server under another host name, as a file host would be.
    pub other_host: String,
    hits: Arc<Mutex<Vec<String>>>,
    listener: Listener,
}

impl Server {
    /// Starts a server; `routes` gets the base URLs so pages can hold absolute links.
    pub fn start(routes: impl FnOnce(&str, &str) -> HashMap<String, Reply>) -> Server {
        let listener = Listener::bind();
        let port = listener.local_addr().unwrap().port();
        let base = format!("http://127.0.0.1:{port}");
        let other_host = format!("http://localhost:{port}");
        let routes = routes(&base, &other_host);
        let hits = Arc::new(Mutex::new(Vec::new()));
        let listener = {
            let hits = hits.clone();
            Listener::serve(listener, move |stream| serve(stream, &routes, &hits))
        };
        Server {
            base,
            other_host,
            hits,
            listener,
        }
    }

    /// The paths requested so far, in order.
    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }

    /// Stops listening: later connections are refused.
    pub fn stop(&mut self) {
        self.listener.stop();
    }
}

fn serve(
    stream: TcpStream,
    routes: &HashMap<String, Reply>,
    hits: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_owned();
    hits.lock().unwrap().push(path.clone());
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stream);
    let head = |status: &str, content_type: &str, length: u64, extra: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\
             {extra}Connection: close\r\n\r\n"
        )
    };
    match routes.get(&path) {
        Some(Reply::Body { content_type, body }) => {
            out.write_all(head("200 OK", content_type, body.len() as u64, "").as_bytes())?;
            out.write_all(body)?;
        }
        Some(Reply::Generated {
            content_type,
            length,
            write,
        }) => {
            out.write_all(head("200 OK", content_type, *length, "").as_bytes())?;
            write(&mut out)?;
        }
        Some(Reply::Redirect(to)) => {
            let extra = format!("Location: {to}\r\n");
            out.write_all(head("302 Found", "text/plain", 0, &extra).as_bytes())?;
        }
        Some(Reply::Status(code)) => {
            out.write_all(head(&format!("{code} Canned"), "text/plain", 0, "").as_bytes())?;
        }
        None => out.write_all(head("404 Not Found", "text/plain", 0, "").as_bytes())?,
    }
    out.flush()
}

/// A wheel holding `members` plus the metadata files every wheel has.
pub fn build_wheel(dist: &str, version: &str, members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    let info = format!("{dist}-{version}.dist-info");
    let metadata = format!("Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n");
    let mut all: Vec<(String, Vec<u8>)> = vec![(format!("{dist}/__init__.py"), b"".to_vec())];
    all.extend(members.iter().map(|(n, b)| ((*n).to_owned(), b.to_vec())));
    all.push((format!("{info}/METADATA"), metadata.into_bytes()));
    all.push((
        format!("{info}/WHEEL"),
        b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
    ));
    all.push((format!("{info}/RECORD"), b"".to_vec()));
    for (name, body) in all {
        zip.start_file(name, options).unwrap();
        zip.write_all(&body).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// Every regular file under `dir` (empty when it does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

pub fn options(server_base: &str, cache: &Path) -> oxibonsai_hub::FetchOptions {
    oxibonsai_hub::FetchOptions {
        offline: false,
        index_url: Some(format!("{server_base}/simple/")),
        cache_dir: Some(cache.to_path_buf()),
        progress: false,
        ..oxibonsai_hub::FetchOptions::default()
    }
}
