//! `oxibonsai serve` against slow and heavy clients, over real sockets (SmolLM2-135M): request
//! heads, idle connections and bodies that take too long are cut off; a shutdown ends within 5 s
//! whatever the clients do; `/tokenize` of large bodies stays bounded in memory.
//! The measured times and sizes are printed (they go in BENCHMARKS.md); the assertions are the
//! bounds the server promises, with room for a loaded machine.

mod serve_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{read_answer, smollm2, Server};

fn wait_healthy(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long until the server closes `stream` (reads to the end, discarding), at most `bound`.
fn closed_after(stream: &mut TcpStream, bound: Duration) -> Option<Duration> {
    let start = Instant::now();
    stream.set_read_timeout(Some(bound)).unwrap();
    let mut sink = [0u8; 4096];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(start.elapsed())
            }
            Err(_) => return None,
        }
    }
}

#[test]
fn slow_heads_idle_connections_and_slow_bodies_are_cut_off() {
    let timeout = 2;
    let server = Server::start(
        &smollm2(),
        &[
            "--parallel",
            "1",
            "--ctx",
            "256",
            "--header-timeout",
            &timeout.to_string(),
        ],
        &[],
    );
    wait_healthy(&server);
    let bound = Duration::from_secs(timeout + 3);

    // 16 clients sending one header line every 500 ms, never ending the head.
    let slow: Vec<_> = (0..16)
        .map(|_| {
            let addr = server.addr().to_owned();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connects");
                let start = Instant::now();
                let _ = s.write_all(b"GET /health HTTP/1.1\r\n");
                for i in 0.. {
                    std::thread::sleep(Duration::from_millis(500));
                    if s.write_all(format!("x-slow-{i}: 1\r\n").as_bytes())
                        .is_err()
                    {
                        break;
                    }
                    if start.elapsed() > Duration::from_secs(30) {
                        break;
                    }
                }
                // Writes fail once the server closed; reading confirms it.
                closed_after(&mut s, Duration::from_secs(5)).map(|_| start.elapsed())
            })
        })
        .collect();
    // The server stays responsive meanwhile.
    assert_eq!(server.get("/health").0, 200);
    let mut worst = Duration::ZERO;
    for t in slow {
        let closed = t
            .join()
            .unwrap()
            .expect("a slow-header connection was never closed");
        worst = worst.max(closed);
    }
    println!("slow-header connections closed after at most {worst:?} (timeout {timeout} s)");
    assert!(worst < bound + Duration::from_secs(1), "{worst:?}");

    // An idle keep-alive connection after one answer.
    let mut idle = TcpStream::connect(server.addr()).unwrap();
    write!(idle, "GET /health HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut reader = BufReader::new(idle.try_clone().unwrap());
    assert_eq!(read_answer(&mut reader).expect("an answer").0, 200);
    let closed = closed_after(&mut idle, bound).expect("an idle connection was never closed");
    println!("idle keep-alive connection closed after {closed:?}");

    // A body that stops half-way: 408 in the JSON shape, and the connection ends.
    let mut body = TcpStream::connect(server.addr()).unwrap();
    write!(
        body,
        "POST /tokenize HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"content\": "
    )
    .unwrap();
    body.set_read_timeout(Some(bound)).unwrap();
    let mut reader = BufReader::new(body);
    let (status, head, text) = read_answer(&mut reader).expect("an answer to a stalled body");
    assert_eq!(status, 408, "{head}{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "request_timeout", "{v}");
    assert!(head.contains("connection: close"), "{head}");
}

/// Reads server-sent events from a streaming answer until `[DONE]` or the end: the text of each
/// `data:` line.
fn read_events(reader: &mut impl BufRead, mut each: impl FnMut(&str)) {
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            each(data);
            if data == "[DONE]" {
                return;
            }
        }
    }
}

fn start_stream(server: &Server, max_tokens: usize) -> BufReader<TcpStream> {
    // The end tokens banned: the stream runs for `max_tokens`.
    let body = json!({"prompt": "Once upon a time", "max_tokens": max_tokens, "stream": true,
        "temperature": 0, "logit_bias": {"0": -100, "1": -100, "2": -100}})
    .to_string();
    let mut s = TcpStream::connect(server.addr()).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains(" 200 "), "{line}");
    reader
}

#[test]
fn shutdown_ends_within_five_seconds_whatever_the_clients_do() {
    let mut server = Server::start(&smollm2(), &["--parallel", "2", "--ctx", "4096"], &[]);
    wait_healthy(&server);
    // A stream that would run for minutes, and one reading nothing.
    let mut stream = start_stream(&server, 4000);
    // Running: its first chunk has come.
    let mut line = String::new();
    while !line.starts_with("data: {") {
        line.clear();
        assert!(stream.read_line(&mut line).unwrap() > 0, "the stream ended");
    }
    let _unread = start_stream(&server, 4000);
    // A half-sent head, a half-sent body, an idle keep-alive connection.
    let mut half_head = TcpStream::connect(server.addr()).unwrap();
    half_head
        .write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    let mut half_body = TcpStream::connect(server.addr()).unwrap();
    half_body
        .write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{")
        .unwrap();
    let idle = TcpStream::connect(server.addr()).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let tail = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&tail);
    let reader = std::thread::spawn(move || {
        let mut last = Vec::new();
        read_events(&mut stream, |d| {
            last.push(d.to_owned());
            if last.len() > 3 {
                last.remove(0);
            }
        });
        seen.store(true, Ordering::Relaxed);
        last
    });
    let took = server
        .interrupt(Duration::from_secs(8))
        .expect("the server was still running 8 s after SIGINT");
    println!("shutdown took {took:?}");
    assert!(
        took <= Duration::from_secs(5),
        "shutdown took {took:?}\n{}",
        server.log()
    );
    let last = reader.join().unwrap();
    // The running stream was told: an error chunk naming the shutdown, then [DONE].
    assert!(tail.load(Ordering::Relaxed));
    assert_eq!(last.last().map(String::as_str), Some("[DONE]"), "{last:?}");
    assert!(
        last.iter().any(|d| d.contains("shutting_down")),
        "no shutdown error chunk: {last:?}"
    );
    drop((half_head, half_body, idle));
}

/// Resident set size of `pid` in KiB.
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

/// Sends each body to `/tokenize` at once from its own connection while sampling the server's
/// resident set and timing `/health`: the answers, the peak RSS rise in MiB, the worst `/health`.
fn concurrent_tokenize(server: &Server, bodies: &[String]) -> (Vec<String>, f64, Duration) {
    let pid = server.pid();
    let before = rss_kib(pid).expect("the server's RSS");
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let health = {
        let done = Arc::clone(&done);
        let addr = server.addr().to_owned();
        std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            while !done.load(Ordering::Relaxed) {
                let start = Instant::now();
                let mut s = TcpStream::connect(&addr).unwrap();
                s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    .unwrap();
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                assert!(out.starts_with("HTTP/1.1 200"), "{out}");
                worst = worst.max(start.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            worst
        })
    };
    let clients: Vec<_> = bodies
        .iter()
        .map(|body| {
            let body = body.clone();
            let addr = server.addr().to_owned();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                write!(
                    s,
                    "POST /tokenize HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                )
                .unwrap();
                // The server may refuse before reading it all.
                let _ = s.write_all(body.as_bytes());
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                out
            })
        })
        .collect();
    let answers = clients.into_iter().map(|c| c.join().unwrap()).collect();
    done.store(true, Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    let worst = health.join().unwrap();
    (answers, peak.saturating_sub(before) as f64 / 1024.0, worst)
}

#[test]
fn large_tokenize_bodies_stay_bounded_in_memory() {
    let model = smollm2();
    let server = Server::start(&model, &["--parallel", "1", "--ctx", "512"], &[]);
    wait_healthy(&server);
    // Ordinary prose (words, punctuation, newlines, a little non-ASCII).
    let sentence = "The quick brown fox jumps over the lazy dog, naïvely — 42 times.\n";
    let text = |bytes: usize| sentence.repeat(bytes / sentence.len());
    // Warm the allocator's arenas once, so that the rise measured is the requests' own.
    let (status, _) = server.post("/tokenize", &json!({"content": text(200_000)}).to_string());
    assert_eq!(status, 200);

    // Two 7.5 MB bodies at once: past the text routes' limit, refused without being kept.
    let big = json!({"content": text(7_500_000)}).to_string();
    let (answers, rise, health) = concurrent_tokenize(&server, &[big.clone(), big]);
    for answer in &answers {
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer:.300}");
        assert!(answer.contains("request_too_large"), "{answer:.300}");
    }
    println!("two concurrent 7.5 MB /tokenize bodies: 413, peak RSS rise {rise:.1} MiB, /health worst {health:?}");
    assert!(rise < 64.0, "peak RSS rose {rise:.1} MiB");

    // Two bodies just under the limit: answered, one after the other.
    let content = text(1_000_000);
    let body = json!({"content": content}).to_string();
    let start = Instant::now();
    let (answers, rise, health) = concurrent_tokenize(&server, &[body.clone(), body.clone()]);
    let took = start.elapsed();
    let file = oxibonsai_gguf::GgufFile::open(&model).unwrap();
    let tokenizer = oxibonsai_tokenizer::Tokenizer::from_gguf(&file).unwrap();
    let expected = tokenizer.encode(&content, false, true).unwrap();
    for answer in &answers {
        let (head, json) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let v: Value = serde_json::from_str(json).unwrap();
        let tokens: Vec<u32> = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tokens, expected);
    }
    println!(
        "two concurrent {:.2} MB /tokenize bodies ({} tokens each): peak RSS rise {rise:.1} MiB, \
         {took:?} in all; /health worst {health:?}",
        body.len() as f64 / 1e6,
        expected.len()
    );
    assert!(rise < 64.0, "peak RSS rose {rise:.1} MiB");
}
