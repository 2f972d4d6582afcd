// The Q1_0 product's activation read from memory (q1_0_gemv.wgsl's interface): a Q8_0 tensor
// as `quantize` or `rms_norm_quantize` wrote it, its codes permuted inside each block.

@group(0) @binding(2) var<storage, read> act: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> act_meta: array<vec4<u32>>;

fn prologue(lid: u32) {}

fn act_word(i: u32) -> vec4<u32> {
    return act[i];
}

fn act_meta_word(i: u32) -> vec4<u32> {
    return act_meta[i];
}
