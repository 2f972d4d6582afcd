//! Model conversion: a Hugging Face checkpoint folder (Qwen3, Qwen2, Llama in safetensors) to one
//! GGUF file named and laid out as llama.cpp's `convert_hf_to_gguf.py` writes it ([`hf`]), and
//! re-quantizing a GGUF model the way `llama-quantize` does, with its per-tensor type choices
//! ([`quantize`]). Both plan every tensor before converting any, so bad input writes nothing.
//!
//! Boundary: this crate reads checkpoints and GGUF files, decides, and hands back a filled
//! [`oxibonsai_gguf::GgufWriter`]; it never writes the output file, parses command lines or
//! prints (the `oxibonsai convert` / `quantize` commands do). Weight encodings come from
//! `oxibonsai-formats`, the container from `oxibonsai-gguf`; it knows nothing of the engine.

pub mod hf;
pub mod quantize;

/// Where a conversion stands, for a progress display: each tensor is announced before it is
/// converted and reported with its element count once it is done.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    Started { tensor: &'a str },
    Done { n_elements: u64 },
}
