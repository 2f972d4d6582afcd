//! `--device` / `--gpu-layers` through the binary, on the adapter `OXIBONSAI_GPU_ADAPTER` names
//! (CI: Mesa's lavapipe, `llvmpipe`); no adapter fails these tests (built only with the `gpu`
//! feature, the default). The GPU's greedy tokens are the reference engine's (the golden
//! manifest's), `-ngl` moves exactly the layers asked for, and `auto` never takes a software
//! adapter.

mod common;

use std::process::Command;

use common::Run;
use oxibonsai_testkit::golden;
use serde_json::Value;

/// The binary with `env` set (`None`: removed) on top of the test's environment.
fn oxibonsai_env(args: &[&str], env: &[(&str, Option<&str>)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxibonsai"));
    cmd.args(args);
    for (key, value) in env {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    let out = cmd.output().expect("the oxibonsai binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

fn manifest_entry(name: &str) -> Value {
    let text = std::fs::read_to_string(golden("models/manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    manifest[name].clone()
}

fn ids(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn model_path(entry: &Value) -> String {
    golden(entry["file"].as_str().unwrap())
        .to_str()
        .unwrap()
        .to_owned()
}

/// `logits` from the manifest's prompt then `n` greedy steps: the greedy tokens.
fn greedy(entry: &Value, n: usize, device: &[&str]) -> Vec<u64> {
    let prompt = ids(&entry["prompt_ids"]);
    let tokens = prompt
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let model = model_path(entry);
    let n = n.to_string();
    let mut args = vec![
        "logits", "-m", &model, "--tokens", &tokens, "-n", &n, "--top-k", "1",
    ];
    args.extend_from_slice(device);
    let run = oxibonsai_env(&args, &[]);
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[prompt.len() - 1..]
        .iter()
        .map(|l| l["top"][0][0].as_u64().unwrap())
        .collect()
}

/// `bench --json`'s `device` object.
fn bench_device(model: &str, device: &[&str], env: &[(&str, Option<&str>)]) -> Value {
    let mut args = vec![
        "bench", "-m", model, "-p", "2", "-n", "1", "-r", "1", "-t", "2", "--json",
    ];
    args.extend_from_slice(device);
    let run = oxibonsai_env(&args, env);
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    report["device"].clone()
}

#[test]
fn the_gpu_gives_the_reference_greedy_tokens() {
    // Files whose reference greedy run has no near-tie our CPU backend resolves otherwise (the
    // ternary TQ2_0 / TQ1_0 files have one at their second token, a 0.014 logit gap).
    for name in ["qwen3-q1_0", "qwen3-ternary-q2_0"] {
        let entry = manifest_entry(name);
        let expected = ids(&entry["greedy_ids"]);
        let n = 8.min(expected.len() - 1);
        let ours = greedy(&entry, n, &["--device", "gpu"]);
        assert_eq!(ours[..=n], expected[..=n], "{name} on the GPU");
    }
}

#[test]
fn run_on_the_gpu_prints_the_cpus_greedy_text() {
    let model = model_path(&manifest_entry("qwen3-q1_0"));
    let text = |device: &str| {
        let run = oxibonsai_env(
            &[
                "run",
                "-m",
                &model,
                "-p",
                "Hello world",
                "-n",
                "12",
                "--temp",
                "0",
                "--device",
                device,
            ],
            &[],
        );
        assert_eq!(run.code, 0, "--device {device}: {}", run.stderr);
        run
    };
    let (cpu, gpu) = (text("cpu"), text("gpu"));
    assert_eq!(gpu.stdout, cpu.stdout);
    assert!(gpu.stderr.contains("device: gpu: "), "{}", gpu.stderr);
    assert!(!cpu.stderr.contains("device: gpu"), "{}", cpu.stderr);
}

#[test]
fn gpu_layers_moves_only_the_first_layers() {
    let entry = manifest_entry("qwen3-q1_0");
    let model = model_path(&entry);
    let all = bench_device(&model, &["--device", "gpu"], &[]);
    let gpu = &all["gpu"];
    assert_eq!(all["device"], "gpu", "{all}");
    let n_layer = gpu["n_layer"].as_u64().unwrap();
    assert!(n_layer >= 2, "{all}");
    assert_eq!(gpu["layers_on_gpu"], n_layer, "{all}");
    assert_eq!(gpu["kept_on_cpu"], 0, "{all}");
    assert!(gpu["others_on_gpu"].as_u64().unwrap() >= 1, "{all}");
    // The whole model on the GPU: every pass of the bench one device-resident step.
    assert!(gpu["resident_steps"].as_u64().unwrap() > 0, "{all}");
    assert_eq!(gpu["steps_not_resident"], serde_json::json!([]), "{all}");
    assert!(gpu["adapter"].as_str().is_some_and(|a| !a.is_empty()));
    for key in [
        "api",
        "device_type",
        "max_storage_binding_bytes",
        "shader_f16",
    ] {
        assert!(!gpu[key].is_null(), "{key}: {all}");
    }

    let one = bench_device(&model, &["--device", "gpu", "-ngl", "1"], &[]);
    let g1 = &one["gpu"];
    assert_eq!(g1["layers_on_gpu"], 1, "{one}");
    assert_eq!(
        g1["others_on_gpu"], 0,
        "-ngl 1 keeps the output on the CPU: {one}"
    );
    assert!(g1["kept_on_cpu"].as_u64().unwrap() > 0, "{one}");
    let (b1, ball) = (
        g1["device_bytes"].as_u64().unwrap(),
        gpu["device_bytes"].as_u64().unwrap(),
    );
    assert!(0 < b1 && b1 < ball, "{b1} vs {ball}");
    let ops: Vec<&str> = g1["ops_on_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["what"].as_str())
        .collect();
    assert!(ops.contains(&"matmul q1_0"), "{one}");
    // A partial offload runs op by op, and says why.
    assert_eq!(g1["resident_steps"], 0, "{one}");
    let not_resident = &g1["steps_not_resident"][0];
    assert_eq!(not_resident["what"], "a matrix on the CPU", "{one}");
    assert!(not_resident["count"].as_u64().unwrap() > 0, "{one}");

    // Layer 0 on the GPU, the rest on the CPU: still the reference's tokens.
    let expected = ids(&entry["greedy_ids"]);
    let ours = greedy(&entry, 4, &["--device", "gpu", "--gpu-layers", "1"]);
    assert_eq!(ours[..], expected[..=4]);
}

#[test]
fn a_missing_adapter_is_an_error_naming_it() {
    let model = model_path(&manifest_entry("qwen3-q1_0"));
    let run = oxibonsai_env(
        &[
            "run", "-m", &model, "-p", "Hi", "-n", "2", "--device", "gpu",
        ],
        &[("OXIBONSAI_GPU_ADAPTER", Some("no-such-adapter"))],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("no GPU adapter matches")
            && run.stderr.contains("no-such-adapter")
            && run.stderr.contains("found"),
        "{}",
        run.stderr
    );
}

#[test]
fn auto_never_takes_a_software_adapter() {
    // Named "llvmpipe", a hardware GPU cannot match: auto must stay on the CPU, as on CI.
    let model = model_path(&manifest_entry("qwen3-q1_0"));
    let env = [
        ("OXIBONSAI_GPU_ADAPTER", Some("llvmpipe")),
        ("OXIBONSAI_DEVICE", None),
    ];
    let device = bench_device(&model, &[], &env);
    assert_eq!(device["device"], "cpu", "{device}");
    assert!(device["gpu"].is_null(), "{device}");
    let note = device["note"].as_str().unwrap_or_default();
    assert!(note.contains("no hardware GPU adapter"), "{device}");
    // The environment variable asks for the same.
    let device = bench_device(
        &model,
        &[],
        &[
            ("OXIBONSAI_GPU_ADAPTER", Some("llvmpipe")),
            ("OXIBONSAI_DEVICE", Some("auto")),
        ],
    );
    assert_eq!(device["device"], "cpu", "{device}");

    // `devices` lists the adapter and says auto does not take it.
    let run = oxibonsai_env(&["devices", "--json"], &env);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let listing: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(listing["gpu_support"], true);
    let adapters = listing["adapters"].as_array().unwrap();
    let software: Vec<&Value> = adapters
        .iter()
        .filter(|a| a["name"].as_str().unwrap().contains("Cpu]"))
        .collect();
    assert!(software.iter().all(|a| a["auto"] == false), "{listing}");
}

#[test]
fn a_bad_device_name_is_refused() {
    let model = model_path(&manifest_entry("qwen3-q1_0"));
    let run = oxibonsai_env(&["run", "-m", &model, "-p", "Hi", "--device", "tpu"], &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("unknown device 'tpu'"),
        "{}",
        run.stderr
    );
}
