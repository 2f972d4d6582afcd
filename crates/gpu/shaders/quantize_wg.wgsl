// Activations to Q8_K on the device a workgroup a 256-value block, an invocation a value, through
// q8_k_block_wg.wgsl's `store_wg` — the block quantization the fused ops use, so a fused op's
// codes are this one's — bit for bit the CPU backend's conversion (`q8_k::quantize_activation`,
// the reference quantizer: iscale = −127 / max, max the first value of largest magnitude with its
// sign, codes nearest_int(iscale · x) capped at 127, d = 1 / iscale; both quotients by
// `div_exact`). A block whose amax is below 2^-100 gets d = 0 and zero codes (outside what this
// matches: the CPU keeps a tiny d). One invocation a block, as it was, left a decode step's
// quantization latency-bound: a 4096-value activation is 16 blocks.
//
// Output: each block's codes in order, 4 to a word (64 words), and per block (d, Σ codes).

override N: u32;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> words: array<u32>;
@group(0) @binding(2) var<storage, read_write> block_meta: array<u32>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let first = 256u * (wid.x + wid.y * nwg.x);
    let i = first + lid;
    let valid = i < N;
    var v = 0.0;
    if valid {
        v = x[i];
    }
    store_wg(first, lid, v, valid);
}
