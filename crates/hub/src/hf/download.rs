//! Downloading one blob: resumed from its `.incomplete` file with a `Range` request, hashed on
//! the way, checked against the size and sha256 the Hub announced, then renamed into place.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::cache::RepoCache;
use crate::fetch::{progress_bar, to_hex};
use crate::http::{Answer, Client, Method};
use crate::HubError;

const CHUNK_BYTES: usize = 256 * 1024;

/// What the Hub said about a file, enough to fetch and check it.
pub(crate) struct BlobRequest<'a> {
    /// The file's path in the repository, for messages.
    pub file: &'a str,
    /// Where the bytes are (the Hub's redirect target, e.g. a CDN).
    pub url: &'a str,
    /// Sent with the request (the token, when `url` is on the Hub itself).
    pub headers: &'a [(&'a str, String)],
    pub etag: &'a str,
    pub size: Option<u64>,
    /// Present for LFS files, whose etag is their sha256.
    pub sha256: Option<&'a str>,
}

/// Makes `blobs/<etag>` hold the verified file, downloading what is missing. Another process
/// downloading the same blob is waited for (a lock file), after which its result is used.
pub(crate) fn download_blob(
    client: &Client,
    cache: &RepoCache,
    request: &BlobRequest<'_>,
    progress: bool,
    status_error: &dyn Fn(&Answer) -> HubError,
) -> Result<(), HubError> {
    let blob = cache.blob(request.etag);
    // Held until the blob is in place.
    let _lock = lock_blob(cache, request.etag)?;
    if blob.is_file() {
        return Ok(());
    }
    let partial_path = cache.incomplete(request.etag);
    let (mut partial, mut have) = open_partial(&partial_path, request.size)?;
    let mut hasher = Sha256::new();
    if have > 0 {
        hash_prefix(&partial_path, have, &mut hasher)?;
        tracing::info!("{}: resuming after {have} bytes", request.file);
    }
    let started = Instant::now();
    if request.size != Some(have) {
        let bar = progress_bar(progress, request.size, request.file);
        bar.set_position(have);
        let outcome = receive(
            client,
            request,
            (&mut partial, &partial_path),
            &mut have,
            &mut hasher,
            &bar,
            status_error,
        );
        match &outcome {
            Ok(()) => bar.finish_and_clear(),
            Err(_) => bar.abandon(),
        }
        outcome?;
    }
    install(request, (partial, &partial_path), have, hasher, &blob)?;
    tracing::info!(
        "downloaded {} ({have} bytes, sha256 {}) in {:.1} s",
        request.file,
        if request.sha256.is_some() {
            "verified"
        } else {
            "not listed"
        },
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Takes the blob's lock file (waiting while another process holds it); the lock lasts as long
/// as the returned file.
fn lock_blob(cache: &RepoCache, etag: &str) -> Result<File, HubError> {
    let lock_path = cache.lock_file(etag);
    if let Some(dir) = lock_path.parent() {
        std::fs::create_dir_all(dir).map_err(HubError::io(dir))?;
    }
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(HubError::io(&lock_path))?;
    lock.lock().map_err(HubError::io(&lock_path))?;
    Ok(lock)
}

/// The partial file, opened for appending, and how many bytes of it count (none when it is
/// longer than the file can be).
fn open_partial(partial_path: &Path, size: Option<u64>) -> Result<(File, u64), HubError> {
    if let Some(dir) = partial_path.parent() {
        std::fs::create_dir_all(dir).map_err(HubError::io(dir))?;
    }
    let partial = OpenOptions::new()
        .create(true)
        .append(true)
        .open(partial_path)
        .map_err(HubError::io(partial_path))?;
    let mut have = partial
        .metadata()
        .map_err(HubError::io(partial_path))?
        .len();
    if size.is_some_and(|size| have > size) {
        // Longer than the file can be: not a prefix of it.
        partial.set_len(0).map_err(HubError::io(partial_path))?;
        have = 0;
    }
    Ok((partial, have))
}

/// Checks the received file against the size and sha256 the Hub announced (a file whose hash
/// differs is deleted; a short one is kept for the next run to resume) and renames it into place.
fn install(
    request: &BlobRequest<'_>,
    (partial, partial_path): (File, &Path),
    have: u64,
    hasher: Sha256,
    blob: &Path,
) -> Result<(), HubError> {
    if let Some(size) = request.size {
        if have != size {
            return Err(HubError::BadDownload {
                file: request.file.to_owned(),
                url: request.url.to_owned(),
                reason: format!(
                    "the transfer ended after {have} of {size} bytes; the part is kept in {} \
                     and the next run resumes it",
                    partial_path.display()
                ),
            });
        }
    }
    let found = to_hex(&hasher.finalize());
    if let Some(expected) = request.sha256 {
        if found != expected {
            drop(partial);
            let _ = std::fs::remove_file(partial_path);
            return Err(HubError::ChecksumMismatch {
                file: request.file.to_owned(),
                expected: expected.to_owned(),
                found,
            });
        }
    }
    partial.sync_all().map_err(HubError::io(partial_path))?;
    drop(partial);
    std::fs::rename(partial_path, blob).map_err(HubError::io(blob))?;
    Ok(())
}

/// Feeds the first `len` bytes of the partial file to the hash, so the finished file's hash
/// covers what the previous run wrote.
fn hash_prefix(path: &Path, len: u64, hasher: &mut Sha256) -> Result<(), HubError> {
    let mut file = File::open(path).map_err(HubError::io(path))?.take(len);
    let mut buffer = vec![0u8; CHUNK_BYTES];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => hasher.update(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HubError::io(path)(e)),
        }
    }
}

/// GETs the rest of the file (from byte `have`) and appends it. A server that ignores the
/// range (200) or cannot serve it (416) gets the whole file asked for again.
fn receive(
    client: &Client,
    request: &BlobRequest<'_>,
    (partial, partial_path): (&mut File, &Path),
    have: &mut u64,
    hasher: &mut Sha256,
    bar: &indicatif::ProgressBar,
    status_error: &dyn Fn(&Answer) -> HubError,
) -> Result<(), HubError> {
    let restart = |partial: &mut File, have: &mut u64, hasher: &mut Sha256| {
        partial.set_len(0).map_err(HubError::io(partial_path))?;
        *have = 0;
        *hasher = Sha256::new();
        bar.set_position(0);
        Ok::<(), HubError>(())
    };
    let mut answer = get_from(client, request, *have)?;
    let resumed = answer.status == 206 && content_range_start(&answer) == Some(*have);
    if !resumed && *have > 0 && matches!(answer.status, 200 | 206 | 416) {
        tracing::info!("{}: the server did not resume; starting over", request.file);
        restart(partial, have, hasher)?;
        if answer.status != 200 {
            answer = get_from(client, request, 0)?;
        }
    }
    if !matches!(answer.status, 200 | 206) {
        return Err(status_error(&answer));
    }
    let mut buffer = vec![0u8; CHUNK_BYTES];
    loop {
        let n = match answer.body.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = partial.flush();
                return Err(HubError::BadDownload {
                    file: request.file.to_owned(),
                    url: request.url.to_owned(),
                    reason: format!(
                        "the transfer broke after {have} bytes ({e}); the part is kept and the \
                         next run resumes it"
                    ),
                });
            }
        };
        if request.size.is_some_and(|size| *have + n as u64 > size) {
            restart(partial, have, hasher)?;
            return Err(HubError::BadDownload {
                file: request.file.to_owned(),
                url: request.url.to_owned(),
                reason: format!(
                    "the server sent more than the {} bytes the Hub announced",
                    request.size.unwrap_or_default()
                ),
            });
        }
        hasher.update(&buffer[..n]);
        partial
            .write_all(&buffer[..n])
            .map_err(HubError::io(partial_path))?;
        *have += n as u64;
        bar.inc(n as u64);
    }
}

fn get_from(client: &Client, request: &BlobRequest<'_>, start: u64) -> Result<Answer, HubError> {
    let mut headers: Vec<(&str, String)> = request.headers.to_vec();
    if start > 0 {
        headers.push(("Range", format!("bytes={start}-")));
    }
    client.call(Method::Get, request.url, &headers, true)
}

/// The first byte of a `Content-Range: bytes START-END/TOTAL` answer.
fn content_range_start(answer: &Answer) -> Option<u64> {
    let value = answer.header("content-range")?;
    let range = value.strip_prefix("bytes")?.trim_start();
    range.split('-').next()?.trim().parse().ok()
}
