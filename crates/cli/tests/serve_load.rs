//! `oxibonsai serve` under load (SmolLM2-135M, 8 slots): 32 concurrent streaming clients, 10 %
//! of them abandoning their stream mid-way and 10 % sending invalid requests
//! (`clients/load.py`, asyncio + httpx). The server must answer no 5xx, stay up, free every slot
//! at the end, and keep its memory flat. The length is `OXIBONSAI_TEST_LOAD_SECONDS`
//! (default 120, the two minutes).

mod serve_common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serve_common::{client_python, smollm2, Server};

const CLIENTS: usize = 32;
const SLOTS: &str = "8";

/// Allowed growth of the resident set from the first quarter of the run to the last: 10 % for the
/// allocator (freed buffers are not always returned to the system, and per-thread arenas settle
/// late) plus a fixed 16 MiB for lazily touched pages (a slot's KV cache is reserved up front but
/// its pages become resident only when a long enough sequence writes them). A leak of even one
/// small buffer per request (~2,000 requests per run at 8 slots) grows past this.
const RSS_GROWTH_FACTOR: f64 = 1.10;
const RSS_GROWTH_KIB: u64 = 16 * 1024;

/// The server process: the child of this test whose executable is `oxibonsai` (this test binary
/// starts only one).
fn server_pid() -> u32 {
    let me = std::process::id();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_oxibonsai")).expect("the binary exists");
    let entries = std::fs::read_dir("/proc").expect("reading /proc");
    let pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": the command may hold spaces, so split after ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            ppid == Some(me)
                && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe)
        })
        .collect();
    assert_eq!(
        pids.len(),
        1,
        "expected one oxibonsai child process, found {pids:?}"
    );
    pids[0]
}

/// Resident set size in KiB (`VmRSS`), or `None` once the process is gone.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Alive and not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// A Prometheus sample's value by its exact name.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse().ok())
}

#[test]
fn thirty_two_streaming_clients_with_cancels_and_bad_requests_leave_the_server_healthy() {
    let seconds: u64 = std::env::var("OXIBONSAI_TEST_LOAD_SECONDS")
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("OXIBONSAI_TEST_LOAD_SECONDS={s} is not a number"))
        })
        .unwrap_or(120);
    let server = Server::start(
        &smollm2(),
        &["--parallel", SLOTS, "--ctx", "4096", "--metrics"],
        &[],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = server_pid();

    let sampler = RssSampler::start(pid);
    let summary = run_load(&server, pid, seconds);
    let samples = sampler.finish();

    // Every slot free and the queue empty soon after the last client left.
    let metrics = wait_idle(&server);
    // Abandoned streams were cancelled in the engine, not generated to their end.
    let cancelled = metric(&metrics, "oxibonsai_requests_cancelled_total").unwrap_or(0.0);
    let abandoned = summary["by_kind"]["abandon"].as_f64().unwrap_or(0.0);
    println!("{abandoned} streams abandoned, {cancelled} requests cancelled by the engine");
    assert!(
        cancelled >= abandoned * 0.5,
        "{cancelled} cancellations for {abandoned} abandoned streams"
    );
    assert_memory_flat(&samples);
}

/// The resident set of a process over a run, sampled from /proc every 250 ms on its own thread.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(f64, u64)>>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kib) = rss_kib(pid) {
                        samples.push((start.elapsed().as_secs_f64(), kib));
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
                samples
            })
        };
        RssSampler { stop, thread }
    }

    /// (seconds since the start, KiB) pairs.
    fn finish(self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the RSS sampler")
    }
}

/// Runs the Python load client against the server; checks that the server survived it, that
/// every answer was 200 or 400 and that every kind of request was made; returns its summary.
fn run_load(server: &Server, pid: u32, seconds: u64) -> serde_json::Value {
    let python = client_python();
    let script =
        oxibonsai_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("tests/clients/load.py");
    assert!(script.is_file(), "{}", script.display());
    let script = script.display().to_string();
    let out = Command::new(&python)
        .args([
            &script,
            &server.base,
            &seconds.to_string(),
            &CLIENTS.to_string(),
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} (OXIBONSAI_TEST_PYTHON): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        alive(pid) && server.get("/health").0 == 200,
        "the server is down after the load:\n{}",
        server.log()
    );
    assert!(
        out.status.success(),
        "the load run failed:\n{stdout}\n{stderr}\nserver log (tail):\n{}",
        tail(&server.log(), 40)
    );
    let summary: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary from the load client:\n{stdout}"));
    let by_status = summary["by_status"].as_object().expect("by_status");
    assert!(
        by_status.keys().all(|s| s == "200" || s == "400"),
        "statuses other than 200 / 400: {by_status:?}"
    );
    for kind in ["complete", "abandon", "invalid"] {
        assert!(
            summary["by_kind"][kind].as_u64().unwrap_or(0) > 0,
            "no '{kind}' request was made: {summary}"
        );
    }
    summary
}

/// Waits (at most 5 s) for every slot to be free and the queue empty; returns the metrics then.
fn wait_idle(server: &Server) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, metrics) = server.get("/metrics");
        assert_eq!(status, 200, "{metrics}");
        let idle = metric(&metrics, "oxibonsai_active_slots") == Some(0.0)
            && metric(&metrics, "oxibonsai_queue_depth") == Some(0.0);
        if idle {
            return metrics;
        }
        assert!(
            Instant::now() < deadline,
            "slots still busy 5 s after the load:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Memory flat: the last quarter's peak against the first quarter's.
fn assert_memory_flat(samples: &[(f64, u64)]) {
    let span = samples.last().map(|s| s.0).unwrap_or(0.0);
    let peak = |from: f64, to: f64| {
        samples
            .iter()
            .filter(|(t, _)| (from..=to).contains(t))
            .map(|s| s.1)
            .max()
            .unwrap_or(0)
    };
    let first = peak(0.0, span / 4.0);
    let last = peak(span * 3.0 / 4.0, span);
    let bound = (first as f64 * RSS_GROWTH_FACTOR) as u64 + RSS_GROWTH_KIB;
    println!(
        "RSS over {span:.0} s ({} samples): first quarter max {} MiB, last quarter max {} MiB, bound {} MiB",
        samples.len(),
        first / 1024,
        last / 1024,
        bound / 1024
    );
    assert!(
        first > 0 && samples.len() >= 8,
        "too few RSS samples: {samples:?}"
    );
    assert!(
        last <= bound,
        "RSS grew from {first} KiB to {last} KiB (bound {bound} KiB)"
    );
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
