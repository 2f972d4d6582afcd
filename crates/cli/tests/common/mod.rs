//! Running the real `oxibonsai` binary from integration tests.

#![allow(dead_code)]

pub mod qwen35_fixture;

use std::path::Path;
use std::process::{Command, Output};

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn oxibonsai<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let output: Output = Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args(args)
        .output()
        .expect("the oxibonsai binary runs");
    Run {
        // A panic exits with 101; a signal has no code: both fail the tests that check codes.
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// A copy of the GGUF `model` at `out` whose `tokenizer.chat_template` is `template` (every other
/// key and tensor unchanged): a random-weight model that answers through another model's template.
pub fn with_chat_template(model: &Path, template: &str, out: &Path) {
    let file = oxibonsai_gguf::GgufFile::open(model)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", model.display()));
    let mut writer = oxibonsai_gguf::GgufWriter::new();
    for (key, value) in file.metadata().iter() {
        if key != "tokenizer.chat_template" {
            writer
                .add_kv(key, value.clone())
                .expect("a key of a valid file");
        }
    }
    writer
        .add_kv("tokenizer.chat_template", template)
        .expect("the template key");
    for t in file.tensors() {
        writer
            .add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))
            .expect("a tensor of a valid file");
    }
    writer
        .write_file(out)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
}

/// The Qwen3.5 chat template (the fixture copied from llama.cpp's `models/templates`).
pub fn qwen35_template() -> String {
    let path = oxibonsai_testkit::fixture("chat_template/Qwen3.5-4B.jinja");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
