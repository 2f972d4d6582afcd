// SwiGLU fused with the quantization of its output to the down product's partner format: the
// codes and scales of swiglu.wgsl followed by the standalone quantization, bit for bit (the same
// expression, the same block quantization), without writing the product back. `gate_up` holds
// the gate's N values, then up's (a stacked gate / up product's output). A workgroup quantizes
// 256 values, an invocation a value, through the joined piece's `store_wg` (q8_0_block_wg.wgsl,
// with q8_0_meta.wgsl or q8_1_meta.wgsl; q8_k_block_wg.wgsl).

override N: u32;

@group(0) @binding(0) var<storage, read> gate_up: array<f32>;
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
        let g = gate_up[i];
        v = (g / (1.0 + exp(-g))) * gate_up[N + i];
    }
    store_wg(first, lid, v, valid);
}
