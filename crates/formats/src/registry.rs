//! The format registry. Adding a format = one module + one row in [`REGISTRY`] + its golden vectors.

/// Identifies a format in code. GGUF type ids are not unique keys (id 42 has two layouts), so the
/// engine names formats by this enum and looks rows up with [`format()`].
// The reference engine's spelling (`Q8_K`, `TQ1_0`) is the domain's name for these types.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FormatKind {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q8_K,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    TQ1_0,
    TQ2_0,
    Q1_0,
    /// Mainline Q2_0: group 64, 18-byte blocks (GGUF id 42).
    Q2_0,
    /// PrismML's legacy group-128 Q2_0: 34-byte blocks, also GGUF id 42.
    Q2_0G128Legacy,
    /// PrismML's PQ2_0 (GGUF id 142): the Q2_0 codec at 128 values a block.
    PQ2_0,
    /// PrismML's PTQ1_0 (GGUF id 143): TQ1_0's base-3 ternary packing at 128 values a block.
    PTQ1_0,
    /// IQ4_NL: 32 values as indices into a fixed non-linear table of 16 levels.
    IQ4_NL,
}

/// Dequantize whole blocks: `src.len() == n_blocks * block_bytes`, `dst.len() == n_blocks * block_elems`.
///
/// The table's functions panic when the lengths break that contract (a caller's bug); data from
/// outside goes through the checked row helpers ([`Format::dequantize_row_into`] …) instead.
pub type DequantizeFn = fn(src: &[u8], dst: &mut [f32]);
/// Quantize whole blocks (the reference quantizer, no importance matrix).
pub type QuantizeFn = fn(src: &[f32], dst: &mut [u8]);
/// Dot product of `weights` (this format) with `activation` (the partner format), same element count.
pub type DotFn = fn(weights: &[u8], activation: &[u8]) -> f32;

/// One row of the registry.
#[derive(Debug)]
pub struct Format {
    pub kind: FormatKind,
    /// The name llama.cpp prints (`q1_0`, `q8_K`, …).
    pub name: &'static str,
    /// GGUF / ggml type id.
    pub type_id: u32,
    pub block_elems: usize,
    pub block_bytes: usize,
    /// The activation format this one is dotted with (`vec_dot_type` in ggml).
    pub partner: FormatKind,
    pub dequantize: DequantizeFn,
    pub quantize: QuantizeFn,
    pub dot: DotFn,
    /// For a format that is some format's partner: how the CPU backend converts f32 activations
    /// into it (ggml's `from_float`). It may round differently from `quantize` — on x86 Q8_0
    /// activations round ties to even where the reference quantizer rounds them away from
    /// zero — and the dot products must see exactly the reference engine's activation codes.
    /// `None` for formats only ever used as weights.
    pub quantize_activation: Option<QuantizeFn>,
}

macro_rules! row {
    ($kind:ident, $module:ident, $name:literal, $id:literal, $elems:expr, $bytes:expr, $partner:ident) => {
        row!(@ $kind, $module, $name, $id, $elems, $bytes, $partner, None)
    };
    ($kind:ident, $module:ident, $name:literal, $id:literal, $elems:expr, $bytes:expr, $partner:ident, activation: $activation:path) => {
        row!(@ $kind, $module, $name, $id, $elems, $bytes, $partner, Some($activation))
    };
    (@ $kind:ident, $module:ident, $name:literal, $id:literal, $elems:expr, $bytes:expr, $partner:ident, $activation:expr) => {
        Format {
            kind: FormatKind::$kind,
            name: $name,
            type_id: $id,
            block_elems: $elems,
            block_bytes: $bytes,
            partner: FormatKind::$partner,
            dequantize: crate::$module::dequantize,
            quantize: crate::$module::quantize,
            dot: crate::$module::dot,
            quantize_activation: $activation,
        }
    };
}

/// THE registry, one row per format. Retired ggml ids are simply absent.
pub static REGISTRY: &[Format] = &[
    row!(F32, f32, "f32", 0, 1, 4, F32, activation: crate::f32::quantize),
    row!(F16, f16, "f16", 1, 1, 2, F16, activation: crate::f16::quantize),
    row!(Q4_0, q4_0, "q4_0", 2, 32, 18, Q8_0),
    row!(Q4_1, q4_1, "q4_1", 3, 32, 20, Q8_1),
    row!(Q5_0, q5_0, "q5_0", 6, 32, 22, Q8_0),
    row!(Q5_1, q5_1, "q5_1", 7, 32, 24, Q8_1),
    row!(Q8_0, q8_0, "q8_0", 8, 32, 34, Q8_0, activation: crate::q8_0::quantize_activation),
    row!(Q8_1, q8_1, "q8_1", 9, 32, 36, Q8_1, activation: crate::q8_1::quantize_activation),
    row!(Q2_K, q2_k, "q2_K", 10, 256, 84, Q8_K),
    row!(Q3_K, q3_k, "q3_K", 11, 256, 110, Q8_K),
    row!(Q4_K, q4_k, "q4_K", 12, 256, 144, Q8_K),
    row!(Q5_K, q5_k, "q5_K", 13, 256, 176, Q8_K),
    row!(Q6_K, q6_k, "q6_K", 14, 256, 210, Q8_K),
    row!(Q8_K, q8_k, "q8_K", 15, 256, 292, Q8_K, activation: crate::q8_k::quantize_activation),
    row!(BF16, bf16, "bf16", 30, 1, 2, BF16, activation: crate::bf16::quantize),
    row!(TQ1_0, tq1_0, "tq1_0", 34, 256, 54, Q8_K),
    row!(TQ2_0, tq2_0, "tq2_0", 35, 256, 66, Q8_K),
    row!(Q1_0, q1_0, "q1_0", 41, 128, 18, Q8_0),
    row!(Q2_0, q2_0, "q2_0", 42, 64, 18, Q8_0),
    row!(
        Q2_0G128Legacy,
        q2_0_g128_legacy,
        "q2_0_g128_legacy",
        42,
        128,
        34,
        Q8_0
    ),
    row!(PQ2_0, pq2_0, "pq2_0", 142, 128, 34, Q8_0),
    row!(PTQ1_0, ptq1_0, "ptq1_0", 143, 128, 28, Q8_0),
    // Its `from_float` (what a KV cache of this type stores) is not its `ggml_quantize_chunk`
    // quantizer: the activation conversion slot holds it, as ggml's type traits do.
    row!(IQ4_NL, iq4_nl, "iq4_nl", 20, 32, 18, Q8_0, activation: crate::iq4_nl::quantize_row_ref),
];

/// The row of a format.
pub fn format(kind: FormatKind) -> &'static Format {
    // The table is small and this is not called per element.
    REGISTRY
        .iter()
        .find(|f| f.kind == kind)
        .expect("every FormatKind has a registry row (checked by a test)")
}

/// Every layout registered under a GGUF type id: empty for an unknown id, two for id 42.
pub fn formats_with_type_id(type_id: u32) -> impl Iterator<Item = &'static Format> {
    REGISTRY.iter().filter(move |f| f.type_id == type_id)
}

/// Looks a format up by the name llama.cpp uses (case-insensitive: `q8_K` and `q8_k` both work).
pub fn format_by_name(name: &str) -> Option<&'static Format> {
    REGISTRY.iter().find(|f| f.name.eq_ignore_ascii_case(name))
}

impl Format {
    /// Bytes taken by `n_elems` values, or `None` when `n_elems` is not a whole number of blocks.
    pub fn bytes_for(&self, n_elems: u64) -> Option<u64> {
        if !n_elems.is_multiple_of(self.block_elems as u64) {
            return None;
        }
        (n_elems / self.block_elems as u64).checked_mul(self.block_bytes as u64)
    }
}
