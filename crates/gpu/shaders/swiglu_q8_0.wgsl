// SwiGLU fused with the Q8_0 quantization of its output: the codes and scales of swiglu.wgsl
// followed by quantize_q8_0.wgsl, bit for bit (the same expression, the same block quantization),
// without writing the product back. `gate_up` holds the gate's N_BLOCKS · 32 values, then up's
// (a stacked gate / up product's output). One invocation a 32-value block.

override N_BLOCKS: u32;

@group(0) @binding(0) var<storage, read> gate_up: array<f32>;
@group(0) @binding(1) var<storage, read_write> words: array<u32>;
@group(0) @binding(2) var<storage, read_write> block_meta: array<u32>;

@compute @workgroup_size(64)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let blk = gid.x + gid.y * nwg.x * 64u;
    if blk >= N_BLOCKS {
        return;
    }
    var v: array<f32, 32>;
    for (var j = 0u; j < 32u; j++) {
        let i = 32u * blk + j;
        let g = gate_up[i];
        v[j] = (g / (1.0 + exp(-g))) * gate_up[N_BLOCKS * 32u + i];
    }
    store_q8_0_block(blk, &v);
}
