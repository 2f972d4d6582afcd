//! Running the real `oxibonsai` binary from integration tests.

#![allow(dead_code)]

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
