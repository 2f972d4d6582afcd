//! The registry tells the truth: one row per kind, and ids, block geometry and partners as the
//! reference engine lists them in `golden/quant/index.json`.

use std::collections::BTreeMap;

use oxibonsai_formats::{format, format_by_name, formats_with_type_id, FormatKind, REGISTRY};
use oxibonsai_testkit::golden;
use serde::Deserialize;

/// Every kind. The match below fails to compile when a kind is added, as a reminder to list it.
const ALL_KINDS: [FormatKind; 23] = [
    FormatKind::F32,
    FormatKind::F16,
    FormatKind::BF16,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::Q8_0,
    FormatKind::Q8_1,
    FormatKind::Q8_K,
    FormatKind::Q2_K,
    FormatKind::Q3_K,
    FormatKind::Q4_K,
    FormatKind::Q5_K,
    FormatKind::Q6_K,
    FormatKind::TQ1_0,
    FormatKind::TQ2_0,
    FormatKind::Q1_0,
    FormatKind::Q2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::PQ2_0,
    FormatKind::PTQ1_0,
    FormatKind::IQ4_NL,
];

#[allow(dead_code)]
fn listed(kind: FormatKind) {
    use FormatKind::*;
    match kind {
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | Q8_K | Q2_K | Q3_K | Q4_K
        | Q5_K | Q6_K | TQ1_0 | TQ2_0 | Q1_0 | Q2_0 | Q2_0G128Legacy | PQ2_0 | PTQ1_0 | IQ4_NL => {}
    }
}

#[derive(Deserialize)]
struct IndexEntry {
    id: u32,
    block_elems: usize,
    block_bytes: usize,
    vec_dot_type: String,
}

#[test]
fn every_kind_has_exactly_one_row() {
    for kind in ALL_KINDS {
        let rows = REGISTRY.iter().filter(|f| f.kind == kind).count();
        assert_eq!(rows, 1, "{kind:?} has {rows} rows");
        assert_eq!(format(kind).kind, kind);
        assert!(
            (kind as usize) < oxibonsai_formats::kernels::N_KINDS,
            "{kind:?} does not fit the kernel tables (raise kernels::N_KINDS)"
        );
    }
    assert_eq!(
        REGISTRY.len(),
        ALL_KINDS.len(),
        "a row for an unlisted kind"
    );
}

#[test]
fn names_are_unique_and_found_case_insensitively() {
    for f in REGISTRY {
        assert_eq!(
            REGISTRY
                .iter()
                .filter(|g| g.name.eq_ignore_ascii_case(f.name))
                .count(),
            1,
            "{}",
            f.name
        );
        assert_eq!(
            format_by_name(&f.name.to_uppercase()).map(|g| g.kind),
            Some(f.kind)
        );
    }
    assert!(
        format_by_name("q4_2").is_none(),
        "q4_2 (retired id 4) is not a format"
    );
}

#[test]
fn rows_match_the_reference_index() {
    let path = golden("quant/index.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let index: BTreeMap<String, IndexEntry> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut checked = 0;
    for (name, entry) in &index {
        let Some(f) = format_by_name(name) else {
            continue; // Formats not registered yet (q5_0, the K-quants).
        };
        // The index keys are file names, lower-cased; llama.cpp prints the K-quants as `q6_K`.
        assert!(
            f.name.eq_ignore_ascii_case(name),
            "spelling of {name}: {}",
            f.name
        );
        assert_eq!(f.type_id, entry.id, "{name}: type id");
        assert_eq!(f.block_elems, entry.block_elems, "{name}: block_elems");
        assert_eq!(f.block_bytes, entry.block_bytes, "{name}: block_bytes");
        assert!(
            f.partner_format()
                .name
                .eq_ignore_ascii_case(&entry.vec_dot_type),
            "{name}: partner {} but vec_dot_type {}",
            f.partner_format().name,
            entry.vec_dot_type
        );
        checked += 1;
    }
    // Every registered weight format the reference lists: all but the partner-only Q8_1 / Q8_K,
    // PTQ1_0, which only PrismML's fork has, and IQ4_NL, which the golden index leaves out (their
    // rows are checked below).
    assert_eq!(
        checked,
        REGISTRY.len() - 4,
        "formats checked against the index"
    );
}

/// PTQ1_0 as the fork's ggml.h / ggml-common.h / ggml-cpu.c define it (specs/bonsai2-formats.md
/// §1.1, §1.5, §1.7): type 143, 28 bytes per 128 values, dotted with Q8_0, named as llama-bench
/// labels it.
#[test]
fn ptq1_0_row_matches_the_fork() {
    let f = format(FormatKind::PTQ1_0);
    assert_eq!(
        (f.name, f.type_id, f.block_elems, f.block_bytes, f.partner),
        ("ptq1_0", 143, 128, 28, FormatKind::Q8_0)
    );
    assert_eq!(formats_with_type_id(143).count(), 1);
}

/// IQ4_NL as ggml.h / ggml-common.h / ggml-cpu.c define it: type 20, 18 bytes per 32 values
/// (`block_iq4_nl`), dotted with Q8_0 (`vec_dot_type`).
#[test]
fn iq4_nl_row_matches_the_reference() {
    let f = format(FormatKind::IQ4_NL);
    assert_eq!(
        (f.name, f.type_id, f.block_elems, f.block_bytes, f.partner),
        ("iq4_nl", 20, 32, 18, FormatKind::Q8_0)
    );
    assert_eq!(formats_with_type_id(20).count(), 1);
}

#[test]
fn every_partner_can_quantize_activations_and_is_its_own_partner() {
    for f in REGISTRY {
        let partner = f.partner_format();
        assert!(
            partner.quantize_activation.is_some(),
            "{}'s partner {} has no activation quantizer",
            f.name,
            partner.name
        );
        assert_eq!(
            partner.partner, partner.kind,
            "{} is dotted with itself",
            partner.name
        );
    }
}

#[test]
fn id_42_has_two_layouts_and_unknown_ids_none() {
    let mut layouts: Vec<_> = formats_with_type_id(42)
        .map(|f| (f.kind, f.block_bytes))
        .collect();
    layouts.sort();
    assert_eq!(
        layouts,
        vec![(FormatKind::Q2_0, 18), (FormatKind::Q2_0G128Legacy, 34)]
    );
    assert_eq!(formats_with_type_id(4).count(), 0, "retired id 4");
    assert_eq!(
        formats_with_type_id(41).map(|f| f.kind).collect::<Vec<_>>(),
        vec![FormatKind::Q1_0]
    );
}

#[test]
fn bytes_for_counts_whole_blocks_only() {
    let q1_0 = format(FormatKind::Q1_0);
    assert_eq!(q1_0.bytes_for(256), Some(36));
    assert_eq!(q1_0.bytes_for(0), Some(0));
    assert_eq!(
        q1_0.bytes_for(576),
        None,
        "SmolLM2's rows of 576 do not fit Q1_0"
    );
    assert_eq!(
        format(FormatKind::F32).bytes_for(u64::MAX),
        None,
        "overflow is None"
    );
}
