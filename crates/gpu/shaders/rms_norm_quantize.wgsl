// RMS norm fused with the quantization of its output to the products' partner format: the codes
// and scales of rms_norm.wgsl's y followed by the standalone quantization (quantize_q8_0.wgsl,
// Q8_1 through q8_1_meta.wgsl, quantize_wg.wgsl), bit for bit — the same strided sums and tree,
// the same scale and products, the same block quantization — without writing y. A row of N values
// (a multiple of the partner's block) is spread over GROUPS workgroups of 256 values each: every
// one of them sums the row's squares (in rms_norm.wgsl's order: the same scale in all of them) and
// quantizes its own values, an invocation a value, through the joined piece's `store_wg`
// (q8_0_block_wg.wgsl: eight 32-value blocks; q8_k_block_wg.wgsl: one 256-value block), so the
// row's loads run in parallel.

override ROWS: u32;
override N: u32;
override EPS: f32;
// Workgroups a row: ceil(N / 256).
override GROUPS: u32;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> words: array<u32>;
@group(0) @binding(3) var<storage, read_write> block_meta: array<u32>;

// Value i of the row rms_scale.wgsl norms.
fn rms_in(i: u32) -> f32 {
    return x[i];
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let g = wid.x + wid.y * nwg.x;
    let row = g / GROUPS;
    // Past the last row: the whole workgroup leaves together (uniform).
    if row >= ROWS {
        return;
    }
    let base = row * N;
    let scale = rms_scale(base, lid);
    let first = 256u * (g % GROUPS);
    let i = first + lid;
    let valid = i < N;
    var v = 0.0;
    if valid {
        v = (x[base + i] * scale) * w[i];
    }
    store_wg(base + first, lid, v, valid);
}
