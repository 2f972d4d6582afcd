//! A sequence's state saved to bytes and restored into another sequence (the server's slot
//! files) continues exactly as the original: the next tokens' logits are bit-identical to the
//! original sequence's own continuation (the same computation over the same bytes), and within
//! the parity bounds of one fresh pass over the whole prompt. Files that do not fit — another
//! cache type, a cut file, another format, more positions than the sequence holds — are refused
//! naming what differs, and leave the sequence empty.

use std::sync::Arc;

use oxibonsai_engine::kv_cache::{cache_type_by_name, CacheTypes};
use oxibonsai_engine::{CpuBackend, EngineError, Logits, Model};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare};

fn load(name: &str, isa: Isa) -> Model<CpuBackend> {
    let file = Arc::new(GgufFile::open(golden(&format!("models/{name}.gguf"))).unwrap());
    Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).unwrap()
}

fn refused(result: Result<(usize, usize), EngineError>, needle: &str) {
    match result {
        Err(EngineError::StateFile(reason)) => {
            assert!(reason.contains(needle), "{reason} (wanted '{needle}')")
        }
        other => panic!("not refused as a state file error: {other:?}"),
    }
}

#[test]
fn a_restored_sequence_continues_as_the_saved_one() {
    let prompt: Vec<u32> = (0..19).map(|i| (i * 53 + 7) % 1000).collect();
    let tail = [11u32, 400, 9];
    for name in ["qwen3-f16", "qwen3-q1_0"] {
        let model = load(name, Isa::Scalar);
        let n_vocab = model.config.n_vocab;
        let mut original = model.new_sequence(48).unwrap();
        model.forward(&mut original, &prompt, Logits::Last).unwrap();
        let mut file = Vec::new();
        let written = original.save_state(&mut file).unwrap();
        assert_eq!(written, file.len());

        let mut restored = model.new_sequence(48).unwrap();
        // Stale positions in the receiver are replaced.
        model
            .forward(&mut restored, &[5; 30], Logits::Last)
            .unwrap();
        let (n, read) = restored.load_state(&mut file.as_slice()).unwrap();
        assert_eq!((n, read), (prompt.len(), file.len()));
        assert_eq!(restored.tokens(), &prompt[..]);

        let want = model
            .forward(&mut original, &tail, Logits::All)
            .unwrap()
            .to_vec();
        let got = model
            .forward(&mut restored, &tail, Logits::All)
            .unwrap()
            .to_vec();
        assert_eq!(got, want, "{name}: the restored sequence's logits differ");

        let whole: Vec<u32> = prompt.iter().chain(&tail).copied().collect();
        let mut fresh = model.new_sequence(48).unwrap();
        let reference = model.forward(&mut fresh, &whole, Logits::All).unwrap();
        let rows = &reference[prompt.len() * n_vocab..];
        let report = compare(&got, rows, n_vocab);
        assert!(
            report.passes(bounds(&format!("logits/{name}.f32"))),
            "{name}: {report:?}"
        );

        // Refusals, each leaving the sequence empty.
        let mut short = model.new_sequence(8).unwrap();
        refused(short.load_state(&mut file.as_slice()), "at most 8");
        assert_eq!(short.n_past(), 0);
        let mut cut = model.new_sequence(48).unwrap();
        refused(
            cut.load_state(&mut &file[..file.len() - 3]),
            "reading layer",
        );
        assert_eq!(cut.n_past(), 0);
        let mut longer = file.clone();
        longer.push(0);
        refused(
            cut.load_state(&mut longer.as_slice()),
            "after the last layer",
        );
        refused(cut.load_state(&mut &b"GGUF0000"[..]), "OXBS");
        let mut q8 = load(name, Isa::Scalar);
        let q8_0 = cache_type_by_name("--cache-type-k", "q8_0").unwrap();
        q8.set_cache_types(CacheTypes { k: q8_0, v: q8_0 }).unwrap();
        let mut other = q8.new_sequence(48).unwrap();
        refused(other.load_state(&mut file.as_slice()), "row bytes");
        assert_eq!(other.n_past(), 0);
    }
}
