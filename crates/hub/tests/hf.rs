//! `hf:` specs against a local server that answers as the Hugging Face Hub does: the cache
//! layout `huggingface_hub` uses, one download per file, resumed downloads, checksums, tokens,
//! the Hub's refusals explained, and offline use.

mod fake_hub;

use std::path::{Path, PathBuf};

use fake_hub::{fake_gguf, sha256_hex, FakeHub, HubFile, HubRepo};
use oxibonsai_hub::{fetch_hf, resolve_model, FetchOptions, HfSpec, HubError};

const SIZE: usize = 300_000;

fn options(hub: &FakeHub, dir: &Path) -> FetchOptions {
    FetchOptions {
        offline: false,
        // Nothing listens there: a pypi request would fail loudly.
        index_url: Some("http://127.0.0.1:9/simple".into()),
        cache_dir: Some(dir.join("oxibonsai")),
        progress: false,
        hf_endpoint: Some(hub.base.clone()),
        hf_cache_dir: Some(dir.join("hub")),
        hf_token: None,
    }
}

fn tiny_repo() -> HubRepo {
    HubRepo::new(
        "org/tiny",
        vec![
            HubFile::lfs("tiny.Q1_0.gguf", fake_gguf(1, SIZE)),
            HubFile::lfs("sub/dir/deep.gguf", fake_gguf(2, 5_000)),
            HubFile::small("config.json", b"{\"model_type\": \"qwen3\"}".to_vec()),
        ],
    )
}

fn spec(text: &str) -> HfSpec {
    HfSpec::parse(text).unwrap()
}

fn repo_dir(opts: &FetchOptions, repo: &str) -> PathBuf {
    opts.hf_cache_dir
        .clone()
        .unwrap()
        .join(format!("models--{}", repo.replace('/', "--")))
}

#[test]
fn a_pulled_file_lands_in_the_huggingface_layout_and_is_fetched_once() {
    let mut hub = FakeHub::start(vec![tiny_repo()]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    let content = fake_gguf(1, SIZE);
    let sha = sha256_hex(&content);
    let commit = tiny_repo().commit;

    let path = resolve_model("hf:org/tiny/tiny.Q1_0.gguf", &opts).unwrap();
    let repo = repo_dir(&opts, "org/tiny");
    assert_eq!(
        path,
        repo.join("snapshots").join(&commit).join("tiny.Q1_0.gguf")
    );
    assert_eq!(std::fs::read(&path).unwrap(), content);
    assert_eq!(
        std::fs::read_link(&path).unwrap(),
        Path::new("../../blobs").join(&sha)
    );
    assert_eq!(
        std::fs::read(repo.join("blobs").join(&sha)).unwrap(),
        content
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        commit
    );
    assert!(!repo
        .join("blobs")
        .join(format!("{sha}.incomplete"))
        .exists());

    // One HEAD (the redirect is not followed by it), one GET at the CDN, without the token or a range.
    let seen = hub.seen();
    let requests: Vec<(String, String)> = seen
        .iter()
        .map(|s| (s.method.clone(), s.path.clone()))
        .collect();
    assert_eq!(
        requests,
        [
            (
                "HEAD".to_owned(),
                "/org/tiny/resolve/main/tiny.Q1_0.gguf".to_owned()
            ),
            ("GET".to_owned(), format!("/cdn/{sha}")),
        ]
    );
    assert!(seen
        .iter()
        .all(|s| s.range.is_none() && s.authorization.is_none()));

    // Pulled again: the Hub is asked, the bytes are not fetched again.
    assert_eq!(
        resolve_model("hf:org/tiny/tiny.Q1_0.gguf", &opts).unwrap(),
        path
    );
    assert_eq!(hub.downloads().len(), 1);
    assert_eq!(hub.seen().len(), 3);

    // With the Hub gone, the cached file is still used, online or offline, by branch or commit.
    hub.stop();
    assert_eq!(
        resolve_model("hf:org/tiny/tiny.Q1_0.gguf", &opts).unwrap(),
        path
    );
    let offline = FetchOptions {
        offline: true,
        ..opts.clone()
    };
    assert_eq!(
        resolve_model("hf:org/tiny/tiny.Q1_0.gguf", &offline).unwrap(),
        path
    );
    let pinned = format!("hf:org/tiny@{commit}/tiny.Q1_0.gguf");
    assert_eq!(resolve_model(&pinned, &opts).unwrap(), path);
    // Another revision was never pulled.
    match resolve_model("hf:org/tiny@v2/tiny.Q1_0.gguf", &offline) {
        Err(HubError::Offline { spec, cache }) => {
            assert_eq!(spec, "hf:org/tiny@v2/tiny.Q1_0.gguf");
            assert_eq!(cache, dir.path().join("hub"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn files_in_folders_and_small_files() {
    let hub = FakeHub::start(vec![tiny_repo()]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    let commit = tiny_repo().commit;

    let deep = fetch_hf(&spec("hf:org/tiny/sub/dir/deep.gguf"), &opts).unwrap();
    let repo = repo_dir(&opts, "org/tiny");
    assert_eq!(
        deep,
        repo.join("snapshots")
            .join(&commit)
            .join("sub/dir/deep.gguf")
    );
    assert_eq!(
        std::fs::read_link(&deep).unwrap(),
        Path::new("../../../../blobs").join(sha256_hex(&fake_gguf(2, 5_000)))
    );
    assert_eq!(std::fs::read(&deep).unwrap(), fake_gguf(2, 5_000));

    // A file kept in git (no LFS) answers 200 itself, named by its git object id.
    let config = fetch_hf(&spec("org/tiny/config.json"), &opts).unwrap();
    let body = b"{\"model_type\": \"qwen3\"}".to_vec();
    assert_eq!(std::fs::read(&config).unwrap(), body);
    let oid = &sha256_hex(&body)[..40];
    assert_eq!(
        std::fs::read_link(&config).unwrap(),
        Path::new("../../blobs").join(oid)
    );
    let gets: Vec<String> = hub
        .seen()
        .into_iter()
        .filter(|s| s.method == "GET")
        .map(|s| s.path)
        .collect();
    assert_eq!(gets.last().unwrap(), "/org/tiny/resolve/main/config.json");
}

#[test]
fn a_broken_download_is_resumed_where_it_stopped() {
    let hub = FakeHub::start(vec![tiny_repo()]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    let content = fake_gguf(1, SIZE);
    let sha = sha256_hex(&content);
    let partial = repo_dir(&opts, "org/tiny")
        .join("blobs")
        .join(format!("{sha}.incomplete"));

    hub.cut_next_download_after(100_000);
    let err = fetch_hf(&spec("hf:org/tiny/tiny.Q1_0.gguf"), &opts).unwrap_err();
    assert!(matches!(err, HubError::BadDownload { .. }), "{err:?}");
    assert!(err.to_string().contains("resumes"), "{err}");
    assert_eq!(std::fs::read(&partial).unwrap(), content[..100_000]);

    let path = fetch_hf(&spec("hf:org/tiny/tiny.Q1_0.gguf"), &opts).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), content);
    assert!(!partial.exists());
    let ranges: Vec<Option<String>> = hub.downloads().into_iter().map(|s| s.range).collect();
    assert_eq!(ranges, [None, Some("bytes=100000-".to_owned())]);
}

#[test]
fn a_server_ignoring_the_range_gets_the_whole_file_again() {
    let hub = FakeHub::start(vec![tiny_repo()]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    hub.cut_next_download_after(50_000);
    fetch_hf(&spec("hf:org/tiny/tiny.Q1_0.gguf"), &opts).unwrap_err();
    hub.ignore_ranges();
    let path = fetch_hf(&spec("hf:org/tiny/tiny.Q1_0.gguf"), &opts).unwrap();
    // Appending the full answer to the part would have made a longer, wrong file.
    assert_eq!(std::fs::read(&path).unwrap(), fake_gguf(1, SIZE));
    let ranges: Vec<Option<String>> = hub.downloads().into_iter().map(|s| s.range).collect();
    assert_eq!(ranges, [None, Some("bytes=50000-".to_owned())]);
}

#[test]
fn a_partial_file_longer_than_announced_is_started_over() {
    let hub = FakeHub::start(vec![tiny_repo()]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    let content = fake_gguf(1, SIZE);
    let blobs = repo_dir(&opts, "org/tiny").join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let sha = sha256_hex(&content);
    std::fs::write(blobs.join(format!("{sha}.incomplete")), vec![7u8; SIZE + 1]).unwrap();
    let path = fetch_hf(&spec("hf:org/tiny/tiny.Q1_0.gguf"), &opts).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), content);
    assert_eq!(hub.downloads()[0].range, None);
}

#[test]
fn a_wrong_checksum_is_rejected_and_the_download_deleted() {
    let mut repo = tiny_repo();
    let wrong = sha256_hex(b"something else");
    repo.files[0].announced_sha256 = Some(wrong.clone());
    let hub = FakeHub::start(vec![repo]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    let err = fetch_hf(&spec("hf:org/tiny/tiny.Q1_0.gguf"), &opts).unwrap_err();
    match &err {
        HubError::ChecksumMismatch {
            file,
            expected,
            found,
        } => {
            assert_eq!(file, "tiny.Q1_0.gguf");
            assert_eq!(*expected, wrong);
            assert_eq!(*found, sha256_hex(&fake_gguf(1, SIZE)));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    let repo = repo_dir(&opts, "org/tiny");
    let left: Vec<_> = std::fs::read_dir(repo.join("blobs")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!repo.join("snapshots").exists());
}

#[test]
fn gated_repositories_need_the_token_and_the_cdn_never_sees_it() {
    let mut repo = tiny_repo();
    repo.token = Some("hf_secret".into());
    let hub = FakeHub::start(vec![repo]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    let file = spec("hf:org/tiny/tiny.Q1_0.gguf");

    let err = fetch_hf(&file, &opts).unwrap_err();
    assert!(
        matches!(
            err,
            HubError::HfAccessDenied {
                status: 401,
                token_sent: false,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("gated or private") && text.contains("HF_TOKEN"),
        "{text}"
    );

    let wrong = FetchOptions {
        hf_token: Some("hf_wrong".into()),
        ..opts.clone()
    };
    let err = fetch_hf(&file, &wrong).unwrap_err();
    assert!(
        matches!(
            err,
            HubError::HfAccessDenied {
                status: 403,
                token_sent: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("token was refused"), "{err}");

    let right = FetchOptions {
        hf_token: Some("hf_secret".into()),
        ..opts
    };
    let path = fetch_hf(&file, &right).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), fake_gguf(1, SIZE));
    let seen = hub.seen();
    let last_head = seen.iter().rev().find(|s| s.method == "HEAD").unwrap();
    assert_eq!(last_head.authorization.as_deref(), Some("Bearer hf_secret"));
    let downloads = hub.downloads();
    assert_eq!(downloads.len(), 1);
    assert_eq!(downloads[0].authorization, None);
}

#[test]
fn missing_repositories_files_and_revisions_are_explained() {
    let hub = FakeHub::start(vec![tiny_repo()]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    for (text, needle) in [
        ("hf:org/nope/m.gguf", "repository org/nope not found"),
        (
            "hf:org/tiny/missing.gguf",
            "file \"missing.gguf\" not found in org/tiny at revision \"main\"",
        ),
        (
            "hf:org/tiny@v9/tiny.Q1_0.gguf",
            "revision \"v9\" not found in org/tiny",
        ),
        ("hf:org/nope", "repository org/nope"),
    ] {
        let err = fetch_hf(&spec(text), &opts).unwrap_err();
        assert!(
            matches!(err, HubError::HfNotFound { .. }),
            "{text}: {err:?}"
        );
        let message = err.to_string();
        assert!(message.contains(needle), "{text}: {message}");
        assert!(message.contains("404"), "{message}");
    }
    // Nothing was left behind for the failures.
    assert!(!repo_dir(&opts, "org/tiny").join("snapshots").exists());
}

#[test]
fn offline_with_an_empty_cache_is_an_error_and_asks_nothing() {
    let hub = FakeHub::start(vec![tiny_repo()]);
    let dir = tempfile::tempdir().unwrap();
    let opts = FetchOptions {
        offline: true,
        ..options(&hub, dir.path())
    };
    for text in ["hf:org/tiny/tiny.Q1_0.gguf", "hf:org/tiny"] {
        let err = resolve_model(text, &opts).unwrap_err();
        assert!(matches!(err, HubError::Offline { .. }), "{err:?}");
        assert!(err.to_string().contains("HF_HUB_OFFLINE"), "{err}");
    }
    assert!(hub.seen().is_empty());
}

#[test]
fn without_a_file_the_only_gguf_is_taken_or_the_choice_listed() {
    let single = HubRepo::new(
        "org/single",
        vec![
            HubFile::small("README.md", b"# single".to_vec()),
            HubFile::lfs("only.gguf", fake_gguf(3, 4_000)),
        ],
    );
    let hub = FakeHub::start(vec![tiny_repo(), single]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());

    let path = fetch_hf(&spec("hf:org/single"), &opts).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), fake_gguf(3, 4_000));
    assert!(path.ends_with("only.gguf"));
    assert_eq!(hub.seen()[0].path, "/api/models/org/single");
    let offline = FetchOptions {
        offline: true,
        ..opts.clone()
    };
    assert_eq!(fetch_hf(&spec("hf:org/single"), &offline).unwrap(), path);

    match fetch_hf(&spec("hf:org/tiny"), &opts) {
        Err(err @ HubError::HfChooseFile { .. }) => {
            let HubError::HfChooseFile { files, .. } = &err else {
                unreachable!()
            };
            assert_eq!(files, &["sub/dir/deep.gguf", "tiny.Q1_0.gguf"]);
            let text = err.to_string();
            assert!(text.contains("holds 2 .gguf files"), "{text}");
            assert!(text.contains("tiny.Q1_0.gguf") && text.contains("hf:org/tiny/FILE.gguf"));
        }
        other => panic!("{other:?}"),
    }
    // Nothing was downloaded for the ambiguous repository.
    assert!(!repo_dir(&opts, "org/tiny").exists());
}

#[test]
fn a_renamed_repository_is_followed_within_the_hub() {
    let mut repo = tiny_repo();
    repo.renamed_from = Some("old-org/old-name".into());
    let hub = FakeHub::start(vec![repo]);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(&hub, dir.path());
    let path = fetch_hf(&spec("hf:old-org/old-name/tiny.Q1_0.gguf"), &opts).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), fake_gguf(1, SIZE));
    // Cached under the name it was asked by, as huggingface_hub does.
    assert!(path.starts_with(repo_dir(&opts, "old-org/old-name")));
    let heads: Vec<String> = hub
        .seen()
        .into_iter()
        .filter(|s| s.method == "HEAD")
        .map(|s| s.path)
        .collect();
    assert_eq!(
        heads,
        [
            "/old-org/old-name/resolve/main/tiny.Q1_0.gguf",
            "/org/tiny/resolve/main/tiny.Q1_0.gguf"
        ]
    );
}
