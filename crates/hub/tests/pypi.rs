//! Fetching GGUF files out of wheels from an index served on 127.0.0.1 by the test itself.

mod common;

use std::collections::HashMap;

use common::{
    build_wheel, bytes, fake_gguf, files_under, html, json, options, sha256_hex, Reply, Server,
};
use oxibonsai_hub::{resolve_model, HubError, SourceRecord};

const MEMBER: &str = "tiny_model/tiny.Q4_1.gguf";
/// Larger than one copy chunk, so streaming and hashing cross chunk boundaries.
const GGUF_LEN: usize = 600_000;

/// The project page's files: versions 0.1.1, 0.1.2 (sdist + wheel each) and a 0.2.0 wheel, each
/// wheel with a different model, linked in every way an index does.
struct Project {
    gguf: Vec<u8>,
    wheel: Vec<u8>,
    wheel_name: &'static str,
}

#[derive(Default)]
struct Tweaks {
    json: bool,
    /// List this sha256 for the 0.1.2 wheel instead of the real one.
    listed_hash: Option<String>,
    /// Link the 0.1.2 wheel through a 302.
    redirect: bool,
    /// Extra members of the 0.1.2 wheel.
    extra_members: Vec<(&'static str, Vec<u8>)>,
}

fn project(tweaks: Tweaks) -> (Server, Project) {
    let gguf = fake_gguf(2, GGUF_LEN);
    let mut members: Vec<(&str, &[u8])> = vec![(MEMBER, &gguf)];
    members.extend(tweaks.extra_members.iter().map(|(n, b)| (*n, b.as_slice())));
    let wheel = build_wheel("tiny_model", "0.1.2", &members);
    let other_wheel = |seed, version| {
        build_wheel(
            "tiny_model",
            version,
            &[(MEMBER, &fake_gguf(seed, GGUF_LEN))],
        )
    };
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("tiny_model-0.1.1.tar.gz", b"sdist 0.1.1".to_vec()),
        ("tiny_model-0.1.1-py3-none-any.whl", other_wheel(1, "0.1.1")),
        ("tiny_model-0.1.2.tar.gz", b"sdist 0.1.2".to_vec()),
        ("tiny_model-0.1.2-py3-none-any.whl", wheel.clone()),
        ("tiny_model-0.2.0-py3-none-any.whl", other_wheel(3, "0.2.0")),
    ];
    let wheel_name = "tiny_model-0.1.2-py3-none-any.whl";
    let server = Server::start(|base, other_host| {
        let mut routes = HashMap::new();
        let mut links = Vec::new();
        for (i, (name, body)) in files.iter().enumerate() {
            let mut hash = sha256_hex(body);
            if *name == wheel_name {
                hash = tweaks.listed_hash.clone().unwrap_or(hash);
            }
            // Relative to the page, absolute on the index host, absolute on another host.
            let href = match i % 3 {
                0 => format!("{other_host}/files/{name}"),
                1 => format!("{base}/files/{name}"),
                _ => format!("../../files/{name}"),
            };
            let href = if *name == wheel_name && tweaks.redirect {
                routes.insert(
                    format!("/go/{name}"),
                    Reply::Redirect(format!("{other_host}/files/{name}")),
                );
                "../../go/".to_owned() + name
            } else {
                href
            };
            routes.insert(format!("/files/{name}"), bytes(body.clone()));
            links.push((name.to_string(), href, hash));
        }
        let page = if tweaks.json {
            let entries: Vec<String> = links
                .iter()
                .map(|(name, href, hash)| {
                    format!(
                        r#"{{"filename": "{name}", "url": "{href}", "hashes": {{"sha256": "{hash}"}}, "requires-python": ">=3.9", "yanked": false}}"#
                    )
                })
                .collect();
            json(format!(
                r#"{{"meta": {{"api-version": "1.1"}}, "name": "tiny-model", "files": [{}], "versions": ["0.1.1", "0.1.2", "0.2.0"]}}"#,
                entries.join(",\n")
            ))
        } else {
            let anchors: Vec<String> = links
                .iter()
                .map(|(name, href, hash)| {
                    format!(r#"<a href="{href}#sha256={hash}" data-requires-python="&gt;=3.9">{name}</a><br/>"#)
                })
                .collect();
            html(format!(
                "<!DOCTYPE html>\n<html><head><title>Links for tiny-model</title></head><body>\n\
                 <h1>Links for tiny-model</h1>\n{}\n</body></html>\n",
                anchors.join("\n")
            ))
        };
        routes.insert("/simple/tiny-model/".to_owned(), page);
        routes
    });
    (
        server,
        Project {
            gguf,
            wheel,
            wheel_name,
        },
    )
}

fn record_of(path: &std::path::Path) -> SourceRecord {
    let mut name = path.as_os_str().to_owned();
    name.push(".source.json");
    serde_json::from_slice(&std::fs::read(name).unwrap()).unwrap()
}

#[test]
fn fetches_the_pinned_version_then_uses_the_cache_without_network() {
    let (mut server, project) = project(Tweaks::default());
    let cache = tempfile::tempdir().unwrap();
    let opts = options(&server.base, cache.path());
    // The name is written unnormalized on purpose: the page lives under `tiny-model`.
    let spec = "pypi:Tiny.Model==0.1.2/tiny.Q4_1.gguf";
    let path = resolve_model(spec, &opts).unwrap();

    assert_eq!(
        path,
        cache.path().join("models/tiny-model-0.1.2/tiny.Q4_1.gguf")
    );
    assert_eq!(std::fs::read(&path).unwrap(), project.gguf);
    let record = record_of(&path);
    assert_eq!(record.wheel, project.wheel_name);
    assert_eq!(record.wheel_sha256, sha256_hex(&project.wheel));
    assert_eq!(record.member, MEMBER);
    assert_eq!(record.size, GGUF_LEN as u64);
    assert_eq!(record.sha256, sha256_hex(&project.gguf));
    assert_eq!(
        server.hits(),
        [
            "/simple/tiny-model/",
            "/files/tiny_model-0.1.2-py3-none-any.whl"
        ]
    );
    // The download was removed once extracted; only the model and its record remain.
    let mut expected = vec![path.clone(), path.with_extension("gguf.source.json")];
    expected.sort();
    assert_eq!(files_under(cache.path()), expected);

    server.stop();
    let again = resolve_model(spec, &opts).unwrap();
    assert_eq!(again, path);
    // The alias-free short form (no file) finds the same entry, still without network.
    assert_eq!(
        resolve_model("pypi:tiny-model==0.1.2", &opts).unwrap(),
        path
    );
    let offline = oxibonsai_hub::FetchOptions {
        offline: true,
        ..opts
    };
    assert_eq!(resolve_model(spec, &offline).unwrap(), path);
}

#[test]
fn json_listing_with_the_file_left_out() {
    let (server, project) = project(Tweaks {
        json: true,
        ..Tweaks::default()
    });
    let cache = tempfile::tempdir().unwrap();
    let path = resolve_model(
        "pypi:tiny_model==0.1.2",
        &options(&server.base, cache.path()),
    )
    .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), project.gguf);
    assert_eq!(record_of(&path).wheel_sha256, sha256_hex(&project.wheel));
}

#[test]
fn a_redirect_to_the_file_is_followed() {
    let (server, project) = project(Tweaks {
        redirect: true,
        ..Tweaks::default()
    });
    let cache = tempfile::tempdir().unwrap();
    let path = resolve_model(
        "pypi:tiny-model==0.1.2/tiny.Q4_1.gguf",
        &options(&server.base, cache.path()),
    )
    .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), project.gguf);
    let wheel = format!("/files/{}", project.wheel_name);
    let go = format!("/go/{}", project.wheel_name);
    assert_eq!(
        server.hits(),
        ["/simple/tiny-model/", go.as_str(), wheel.as_str()]
    );
}

#[test]
fn a_wrong_sha256_is_refused_and_leaves_nothing_in_the_cache() {
    let listed = "ab".repeat(32);
    let (server, project) = project(Tweaks {
        listed_hash: Some(listed.clone()),
        ..Tweaks::default()
    });
    let cache = tempfile::tempdir().unwrap();
    match resolve_model(
        "pypi:tiny-model==0.1.2/tiny.Q4_1.gguf",
        &options(&server.base, cache.path()),
    ) {
        Err(HubError::ChecksumMismatch {
            file,
            expected,
            found,
        }) => {
            assert_eq!(file, project.wheel_name);
            assert_eq!(expected, listed);
            assert_eq!(found, sha256_hex(&project.wheel));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(files_under(cache.path()), Vec::<std::path::PathBuf>::new());
}

#[test]
fn an_unknown_package_names_the_package_and_url() {
    let (server, _) = project(Tweaks::default());
    let cache = tempfile::tempdir().unwrap();
    let err = resolve_model("pypi:No_Such==1.0", &options(&server.base, cache.path())).unwrap_err();
    let url = format!("{}/simple/no-such/", server.base);
    match &err {
        HubError::PackageNotFound { package, url: u } => {
            assert_eq!(package, "No_Such");
            assert_eq!(u, &url);
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("\"No_Such\"") && text.contains(&url),
        "{text}"
    );
}

#[test]
fn a_missing_version_lists_the_versions_there_are() {
    let (server, _) = project(Tweaks::default());
    let cache = tempfile::tempdir().unwrap();
    let err =
        resolve_model("pypi:tiny-model==0.3", &options(&server.base, cache.path())).unwrap_err();
    match &err {
        HubError::VersionNotFound {
            package,
            version,
            available,
            more,
        } => {
            assert_eq!((package.as_str(), version.as_str()), ("tiny-model", "0.3"));
            assert_eq!(available, &["0.2.0", "0.1.2", "0.1.1"]);
            assert_eq!(*more, 0);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("0.2.0, 0.1.2, 0.1.1"), "{err}");
    assert_eq!(server.hits(), ["/simple/tiny-model/"]);
}

#[test]
fn a_file_not_in_the_wheel_lists_the_gguf_members() {
    let (server, project) = project(Tweaks {
        extra_members: vec![("tiny_model/other.Q8_0.gguf", b"GGUF".to_vec())],
        ..Tweaks::default()
    });
    let cache = tempfile::tempdir().unwrap();
    let opts = options(&server.base, cache.path());
    match resolve_model("pypi:tiny-model==0.1.2/missing.gguf", &opts) {
        Err(HubError::MemberNotFound {
            wheel,
            reason,
            members,
        }) => {
            assert_eq!(wheel, project.wheel_name);
            assert!(reason.contains("missing.gguf"), "{reason}");
            assert_eq!(members, [MEMBER, "tiny_model/other.Q8_0.gguf"]);
        }
        other => panic!("{other:?}"),
    }
    // Two models and none named: the spec has to choose.
    match resolve_model("pypi:tiny-model==0.1.2", &opts) {
        Err(HubError::MemberNotFound { reason, .. }) => {
            assert!(reason.contains("several"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // Naming one by its path inside the wheel works.
    let path = resolve_model("pypi:tiny-model==0.1.2/tiny_model/other.Q8_0.gguf", &opts).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"GGUF");
    assert_eq!(
        files_under(&cache.path().join("downloads")),
        Vec::<std::path::PathBuf>::new()
    );
}

#[test]
fn offline_with_an_empty_cache_is_an_error_and_asks_nothing() {
    let (server, _) = project(Tweaks::default());
    let cache = tempfile::tempdir().unwrap();
    let opts = oxibonsai_hub::FetchOptions {
        offline: true,
        ..options(&server.base, cache.path())
    };
    match resolve_model("pypi:tiny-model==0.1.2/tiny.Q4_1.gguf", &opts) {
        Err(HubError::Offline { spec, cache: dir }) => {
            assert_eq!(spec, "pypi:tiny-model==0.1.2/tiny.Q4_1.gguf");
            assert_eq!(dir, cache.path());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.hits(), Vec::<String>::new());
}

#[test]
fn a_server_error_on_the_file_names_the_url_and_status() {
    let server = Server::start(|base, _| {
        let wheel = "w-1.0-py3-none-any.whl";
        let page = format!(
            r#"<a href="{base}/f/{wheel}#sha256={}">{wheel}</a>"#,
            "00".repeat(32)
        );
        HashMap::from([
            ("/simple/w/".to_owned(), html(page)),
            (format!("/f/{wheel}"), Reply::Status(500)),
        ])
    });
    let cache = tempfile::tempdir().unwrap();
    match resolve_model("pypi:w==1.0", &options(&server.base, cache.path())) {
        Err(HubError::Http { url, status }) => {
            assert_eq!(status, 500);
            assert_eq!(url, format!("{}/f/w-1.0-py3-none-any.whl", server.base));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(files_under(cache.path()), Vec::<std::path::PathBuf>::new());
}

#[test]
fn a_download_that_is_not_a_zip_is_a_bad_wheel() {
    let body = b"<html>a captive portal</html>".to_vec();
    let hash = sha256_hex(&body);
    let server = Server::start(move |_, _| {
        let wheel = "w-1.0-py3-none-any.whl";
        let page = format!(r#"<a href="../../f/{wheel}#sha256={hash}">{wheel}</a>"#);
        HashMap::from([
            ("/simple/w/".to_owned(), html(page)),
            (format!("/f/{wheel}"), bytes(body)),
        ])
    });
    let cache = tempfile::tempdir().unwrap();
    match resolve_model("pypi:w==1.0", &options(&server.base, cache.path())) {
        Err(HubError::BadWheel { wheel, .. }) => assert_eq!(wheel, "w-1.0-py3-none-any.whl"),
        other => panic!("{other:?}"),
    }
    assert_eq!(files_under(cache.path()), Vec::<std::path::PathBuf>::new());
}

#[test]
fn a_connection_refused_is_a_network_error_naming_the_url() {
    let mut server = Server::start(|_, _| HashMap::new());
    server.stop();
    let cache = tempfile::tempdir().unwrap();
    match resolve_model("pypi:w==1.0", &options(&server.base, cache.path())) {
        Err(HubError::Network { url, .. }) => assert_eq!(url, format!("{}/simple/w/", server.base)),
        other => panic!("{other:?}"),
    }
}
