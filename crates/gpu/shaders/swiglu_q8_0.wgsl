// SwiGLU fused with the Q8_0 quantization of its output: the codes and scales of swiglu.wgsl
// followed by quantize_q8_0.wgsl, bit for bit (the same expression, the same block quantization),
// without writing the product back. `gate_up` holds the gate's N_BLOCKS · 32 values, then up's
// (a stacked gate / up product's output). A workgroup quantizes 8 blocks, an invocation a value
// (q8_0_block_wg.wgsl).

override N_BLOCKS: u32;

@group(0) @binding(0) var<storage, read> gate_up: array<f32>;
@group(0) @binding(1) var<storage, read_write> words: array<u32>;
@group(0) @binding(2) var<storage, read_write> block_meta: array<u32>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let blk = 8u * (wid.x + wid.y * nwg.x) + lid / 32u;
    let valid = blk < N_BLOCKS;
    var v = 0.0;
    if valid {
        let i = 32u * blk + (lid & 31u);
        let g = gate_up[i];
        v = (g / (1.0 + exp(-g))) * gate_up[N_BLOCKS * 32u + i];
    }
    store_q8_0_block_wg(blk, lid, v, valid);
}
