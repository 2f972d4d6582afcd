//! `pull` and `-m hf:…` through the real binary, against a local server that answers as the
//! Hugging Face Hub does (`HF_ENDPOINT` points at it), serving a small reference model.

#[path = "../../hub/tests/fake_hub/mod.rs"]
mod fake_hub;

use std::path::{Path, PathBuf};
use std::process::Command;

use fake_hub::{fake_gguf, FakeHub, HubFile, HubRepo};
use oxibonsai_testkit::golden;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary with the Hub at `endpoint` and every cache inside `home`, whatever the
/// environment of the test run holds.
fn oxibonsai(home: &Path, endpoint: &str, extra_env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_oxibonsai"));
    command
        .args(args)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HOME", home.join("hf"))
        .env("OXIBONSAI_CACHE", home.join("oxibonsai"))
        .env("OXIBONSAI_LOG", "warn");
    for name in [
        "HF_HUB_CACHE",
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_OFFLINE",
        "OXIBONSAI_OFFLINE",
        "HUGGINGFACE_HUB_CACHE",
    ] {
        command.env_remove(name);
    }
    for (name, value) in extra_env {
        command.env(name, value);
    }
    let output = command.output().expect("the oxibonsai binary runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

fn model_bytes() -> Vec<u8> {
    std::fs::read(golden("models/qwen3-q1_0.gguf")).unwrap()
}

fn model_repo() -> HubRepo {
    HubRepo::new(
        "prism-test/tiny-qwen3",
        vec![
            HubFile::small("README.md", b"# tiny".to_vec()),
            HubFile::lfs("qwen3-q1_0.gguf", model_bytes()),
        ],
    )
}

fn snapshot(home: &Path, repo: &HubRepo, file: &str) -> PathBuf {
    home.join("hf/hub")
        .join(format!("models--{}", repo.id.replace('/', "--")))
        .join("snapshots")
        .join(&repo.commit)
        .join(file)
}

const GREEDY: [&str; 6] = ["-p", "Hello world", "-n", "6", "--temp", "0"];

#[test]
fn pull_then_run_with_an_hf_spec_gives_the_local_model_s_output() {
    let mut hub = FakeHub::start(vec![model_repo()]);
    let home = tempfile::tempdir().unwrap();
    let home = home.path();

    // No FILE: the repository's only .gguf.
    let pulled = oxibonsai(home, &hub.base, &[], &["pull", "prism-test/tiny-qwen3"]);
    assert_eq!(pulled.code, 0, "{}", pulled.stderr);
    let path = snapshot(home, &model_repo(), "qwen3-q1_0.gguf");
    assert_eq!(pulled.stdout, format!("{}\n", path.display()));
    assert_eq!(std::fs::read(&path).unwrap(), model_bytes());

    let local = golden("models/qwen3-q1_0.gguf");
    let mut args = vec!["run", "-m", local.to_str().unwrap()];
    args.extend(GREEDY);
    let expected = oxibonsai(home, &hub.base, &[], &args);
    assert_eq!(expected.code, 0, "{}", expected.stderr);
    assert!(!expected.stdout.trim().is_empty());

    let spec = "hf:prism-test/tiny-qwen3/qwen3-q1_0.gguf";
    let mut args = vec!["run", "-m", spec];
    args.extend(GREEDY);
    let through_hub = oxibonsai(home, &hub.base, &[], &args);
    assert_eq!(through_hub.code, 0, "{}", through_hub.stderr);
    assert_eq!(through_hub.stdout, expected.stdout);
    // `info` takes the spec too, and shows the same model.
    let info = oxibonsai(home, &hub.base, &[], &["info", "--json", spec]);
    let info_local = oxibonsai(
        home,
        &hub.base,
        &[],
        &["info", "--json", local.to_str().unwrap()],
    );
    assert_eq!(info.code, 0, "{}", info.stderr);
    let without_file = |text: &str| {
        let mut value: serde_json::Value = serde_json::from_str(text).unwrap();
        let file = value.as_object_mut().unwrap().remove("file").unwrap();
        (file, value)
    };
    let (file, summary) = without_file(&info.stdout);
    assert_eq!(file, path.to_str().unwrap());
    assert_eq!(summary, without_file(&info_local.stdout).1);
    // Pulled once, however often it was used.
    assert_eq!(hub.downloads().len(), 1);

    // Without the Hub: the cache serves, with --offline or HF_HUB_OFFLINE=1.
    hub.stop();
    let mut args = vec!["run", "--offline", "-m", spec];
    args.extend(GREEDY);
    let offline = oxibonsai(home, &hub.base, &[], &args);
    assert_eq!(offline.code, 0, "{}", offline.stderr);
    assert_eq!(offline.stdout, expected.stdout);
    let again = oxibonsai(
        home,
        &hub.base,
        &[("HF_HUB_OFFLINE", "1")],
        &["pull", "prism-test/tiny-qwen3", "qwen3-q1_0.gguf"],
    );
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.stdout, pulled.stdout);
}

#[test]
fn pull_lists_the_files_when_it_cannot_choose() {
    let repo = HubRepo::new(
        "org/two",
        vec![
            HubFile::lfs("a.Q1_0.gguf", fake_gguf(1, 1000)),
            HubFile::lfs("b.Q2_0.gguf", fake_gguf(2, 1000)),
            HubFile::small("README.md", b"# two".to_vec()),
        ],
    );
    let hub = FakeHub::start(vec![repo]);
    let home = tempfile::tempdir().unwrap();
    let run = oxibonsai(home.path(), &hub.base, &[], &["pull", "hf:org/two"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "a.Q1_0.gguf\nb.Q2_0.gguf\n");
    assert!(run.stderr.contains("holds 2 .gguf files"), "{}", run.stderr);
    assert!(
        run.stderr.contains("oxibonsai pull hf:org/two FILE"),
        "{}",
        run.stderr
    );
    assert!(hub.downloads().is_empty());

    // Naming one, with the revision given apart, pulls it.
    let run = oxibonsai(
        home.path(),
        &hub.base,
        &[],
        &["pull", "org/two", "b.Q2_0.gguf", "--revision", "main"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read(run.stdout.trim_end()).unwrap(),
        fake_gguf(2, 1000)
    );
}

#[test]
fn refusals_are_explained_and_exit_1() {
    let mut gated = HubRepo::new(
        "org/gated",
        vec![HubFile::lfs("m.gguf", fake_gguf(4, 2000))],
    );
    gated.token = Some("hf_good".into());
    let hub = FakeHub::start(vec![model_repo(), gated]);
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    for (args, env, needles) in [
        (
            vec!["pull", "org/nope", "m.gguf"],
            vec![],
            vec!["404", "repository org/nope not found"],
        ),
        (
            vec!["pull", "prism-test/tiny-qwen3", "missing.gguf"],
            vec![],
            vec!["404", "file \"missing.gguf\" not found"],
        ),
        (
            vec!["pull", "org/gated", "m.gguf"],
            vec![],
            vec!["401", "gated or private", "HF_TOKEN"],
        ),
        (
            vec!["pull", "org/gated", "m.gguf", "--token", "hf_bad"],
            vec![],
            vec!["403", "token was refused"],
        ),
        (
            vec!["pull", "org/gated", "m.gguf"],
            vec![("HF_TOKEN", "hf_bad")],
            vec!["403", "token was refused"],
        ),
        (
            vec!["pull", "--offline", "org/gated", "m.gguf"],
            vec![],
            vec!["not in the cache", "offline"],
        ),
        (
            vec!["run", "-m", "hf:org/nope/m.gguf", "-p", "hi"],
            vec![],
            vec!["cannot get the model", "org/nope", "not found"],
        ),
        (
            vec!["pull", "org/two/a.gguf", "b.gguf"],
            vec![],
            vec!["the file is given twice"],
        ),
        (
            vec!["pull", "org"],
            vec![],
            vec!["bad model spec", "ORG/NAME"],
        ),
    ] {
        let run = oxibonsai(home, &hub.base, &env, &args);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        for needle in needles {
            assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
        }
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
    assert!(hub.downloads().is_empty());

    let run = oxibonsai(
        home,
        &hub.base,
        &[("HF_TOKEN", "hf_good")],
        &["pull", "org/gated", "m.gguf"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read(run.stdout.trim_end()).unwrap(),
        fake_gguf(4, 2000)
    );
}
