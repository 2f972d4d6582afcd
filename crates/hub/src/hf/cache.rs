//! The Hugging Face cache, laid out as `huggingface_hub` lays it out so that both tools share one
//! cache (a model pulled by either is found by the other):
//!
//! ```text
//! <root>/models--ORG--NAME/blobs/<etag>               the file's bytes, named by its etag
//! <root>/models--ORG--NAME/blobs/<etag>.incomplete    a download in progress (resumed, not restarted)
//! <root>/models--ORG--NAME/snapshots/<commit>/<file>  a relative symlink to ../../blobs/<etag>
//! <root>/models--ORG--NAME/refs/<revision>            the commit the revision pointed to
//! <root>/.locks/models--ORG--NAME/<etag>.lock         held while the blob is downloaded
//! ```
//! A blob appears only once verified (the `.incomplete` file is renamed into place), and the
//! snapshot link is made after it, so a link that resolves always points at a complete file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::cache::readable_temp;
use crate::HubError;

/// Refs hold one commit hash; a larger file is not one of ours.
const MAX_REF_BYTES: u64 = 1024;
/// How many `.gguf` names a listing of a snapshot keeps.
const MAX_LISTED: usize = 1000;

/// One repository's corner of the cache.
pub(crate) struct RepoCache {
    root: PathBuf,
    folder: String,
}

impl RepoCache {
    pub(crate) fn new(root: &Path, repo: &str) -> RepoCache {
        RepoCache {
            root: root.to_path_buf(),
            folder: format!("models--{}", repo.replace('/', "--")),
        }
    }

    pub(crate) fn dir(&self) -> PathBuf {
        self.root.join(&self.folder)
    }

    pub(crate) fn blob(&self, etag: &str) -> PathBuf {
        self.dir().join("blobs").join(etag)
    }

    pub(crate) fn incomplete(&self, etag: &str) -> PathBuf {
        self.dir().join("blobs").join(format!("{etag}.incomplete"))
    }

    pub(crate) fn lock_file(&self, etag: &str) -> PathBuf {
        self.root
            .join(".locks")
            .join(&self.folder)
            .join(format!("{etag}.lock"))
    }

    pub(crate) fn snapshot(&self, commit: &str, file: &str) -> PathBuf {
        let mut path = self.dir().join("snapshots").join(commit);
        path.extend(file.split('/'));
        path
    }

    fn ref_path(&self, revision: &str) -> PathBuf {
        let mut path = self.dir().join("refs");
        path.extend(revision.split('/'));
        path
    }

    /// The commit `revision` stands for in the cache: itself when it is a commit hash, else
    /// what `refs/<revision>` recorded.
    pub(crate) fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit_hash(revision) {
            return Some(revision.to_owned());
        }
        let file = std::fs::File::open(self.ref_path(revision)).ok()?;
        let mut text = String::new();
        file.take(MAX_REF_BYTES).read_to_string(&mut text).ok()?;
        let commit = text.trim();
        is_safe_name(commit).then(|| commit.to_owned())
    }

    /// Records that `revision` points at `commit` (atomically: temp file + rename).
    pub(crate) fn write_ref(&self, revision: &str, commit: &str) -> Result<(), HubError> {
        if revision == commit {
            return Ok(());
        }
        let path = self.ref_path(revision);
        let dir = parent(&path);
        std::fs::create_dir_all(dir).map_err(HubError::io(dir))?;
        let mut temp = readable_temp(".ref.")
            .tempfile_in(dir)
            .map_err(HubError::io(dir))?;
        temp.write_all(commit.as_bytes())
            .map_err(HubError::io(temp.path()))?;
        temp.persist(&path).map_err(|e| HubError::Io {
            path: path.clone(),
            error: e.error,
        })?;
        Ok(())
    }

    /// The cached `file` at `revision`, when its snapshot link resolves to a blob.
    pub(crate) fn cached_file(&self, revision: &str, file: &str) -> Option<PathBuf> {
        let path = self.snapshot(&self.commit_of(revision)?, file);
        path.is_file().then_some(path)
    }

    /// The `.gguf` files cached for `revision`, as paths inside the repository, sorted.
    pub(crate) fn cached_ggufs(&self, revision: &str) -> Vec<String> {
        let Some(commit) = self.commit_of(revision) else {
            return Vec::new();
        };
        let top = self.dir().join("snapshots").join(commit);
        let mut found = Vec::new();
        let mut stack = vec![(top, String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let path = entry.path();
                let inner = format!("{prefix}{name}");
                // `is_dir` / `is_file` follow the links, so a dangling link counts as absent.
                if path.is_dir() {
                    stack.push((path, format!("{inner}/")));
                } else if path.is_file()
                    && name.to_ascii_lowercase().ends_with(".gguf")
                    && found.len() < MAX_LISTED
                {
                    found.push(inner);
                }
            }
        }
        found.sort();
        found
    }

    /// Points `snapshots/<commit>/<file>` at the blob with a relative link, replacing what was
    /// there (a link is made under a temporary name, then renamed over the old one).
    pub(crate) fn link_snapshot(
        &self,
        commit: &str,
        file: &str,
        etag: &str,
    ) -> Result<PathBuf, HubError> {
        let pointer = self.snapshot(commit, file);
        let dir = parent(&pointer);
        std::fs::create_dir_all(dir).map_err(HubError::io(dir))?;
        // From snapshots/<commit>/<dirs…>/ up to the repository folder: one `..` per level.
        let depth = 2 + file.matches('/').count();
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(etag);
        let temp = dir.join(format!(".{etag}.{}.link", std::process::id()));
        let _ = std::fs::remove_file(&temp);
        make_link(&target, &self.blob(etag), &temp)?;
        std::fs::rename(&temp, &pointer).map_err(HubError::io(&pointer))?;
        Ok(pointer)
    }
}

#[cfg(unix)]
fn make_link(target: &Path, _blob: &Path, link: &Path) -> Result<(), HubError> {
    std::os::unix::fs::symlink(target, link).map_err(HubError::io(link))
}

/// Where symbolic links are not available, the snapshot holds a copy, as `huggingface_hub`
/// does on Windows without developer mode.
#[cfg(not(unix))]
fn make_link(_target: &Path, blob: &Path, link: &Path) -> Result<(), HubError> {
    std::fs::copy(blob, link)
        .map(|_| ())
        .map_err(HubError::io(link))
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// A full commit hash, which names a snapshot directly.
pub(crate) fn is_commit_hash(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A name from the Hub that becomes one path segment (a commit or an etag): letters and digits
/// only, so it cannot climb out of its folder.
pub(crate) fn is_safe_name(text: &str) -> bool {
    !text.is_empty() && text.len() <= 128 && text.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn layout_matches_huggingface_hub() {
        let cache = RepoCache::new(Path::new("/c"), "Org/Name");
        assert_eq!(cache.blob("e1"), Path::new("/c/models--Org--Name/blobs/e1"));
        assert_eq!(
            cache.incomplete("e1"),
            Path::new("/c/models--Org--Name/blobs/e1.incomplete")
        );
        assert_eq!(
            cache.snapshot(COMMIT, "a/b.gguf"),
            Path::new(&format!("/c/models--Org--Name/snapshots/{COMMIT}/a/b.gguf"))
        );
        assert_eq!(
            cache.ref_path("refs/pr/1"),
            Path::new("/c/models--Org--Name/refs/refs/pr/1")
        );
        assert_eq!(
            cache.lock_file("e1"),
            Path::new("/c/.locks/models--Org--Name/e1.lock")
        );
    }

    #[test]
    fn links_are_relative_and_refs_name_commits() {
        let root = tempfile::tempdir().unwrap();
        let cache = RepoCache::new(root.path(), "o/n");
        std::fs::create_dir_all(cache.blob("e1").parent().unwrap()).unwrap();
        std::fs::write(cache.blob("e1"), b"model").unwrap();
        assert_eq!(cache.cached_file("main", "d/m.gguf"), None);
        let pointer = cache.link_snapshot(COMMIT, "d/m.gguf", "e1").unwrap();
        cache.write_ref("main", COMMIT).unwrap();
        #[cfg(unix)]
        assert_eq!(
            std::fs::read_link(&pointer).unwrap(),
            Path::new("../../../blobs/e1")
        );
        assert_eq!(std::fs::read(&pointer).unwrap(), b"model");
        assert_eq!(cache.cached_file("main", "d/m.gguf"), Some(pointer.clone()));
        assert_eq!(cache.cached_file(COMMIT, "d/m.gguf"), Some(pointer.clone()));
        assert_eq!(cache.cached_file("other", "d/m.gguf"), None);
        assert_eq!(cache.cached_ggufs("main"), ["d/m.gguf"]);
        // Relinking replaces the old link.
        std::fs::write(cache.blob("e2"), b"model 2").unwrap();
        cache.link_snapshot(COMMIT, "d/m.gguf", "e2").unwrap();
        assert_eq!(std::fs::read(&pointer).unwrap(), b"model 2");
        // A link whose blob is gone is not a cached file.
        std::fs::remove_file(cache.blob("e2")).unwrap();
        assert_eq!(cache.cached_file("main", "d/m.gguf"), None);
        assert!(cache.cached_ggufs("main").is_empty());
    }

    #[test]
    fn names_from_the_hub_must_be_plain() {
        assert!(is_commit_hash(COMMIT));
        assert!(!is_commit_hash("main"));
        assert!(is_safe_name("abc123"));
        for bad in ["", "..", "a/b", "a b", "a.b"] {
            assert!(!is_safe_name(bad), "{bad}");
        }
    }
}
