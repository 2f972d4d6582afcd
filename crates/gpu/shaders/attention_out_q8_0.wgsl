// The attention head's output quantized to Q8_0 — or Q8_1, with the q8_1_meta.wgsl piece — for
// the output product (HEAD_DIM_V a multiple of 32): the values attention_out_f32.wgsl writes,
// gathered in workgroup memory, then one invocation a block through q8_0_block.wgsl — the bits of
// attention then quantize. (Q8_K's 256-value blocks span heads: attention_out_q8_k.wgsl.)

@group(0) @binding(5) var<storage, read_write> words: array<u32>;
@group(0) @binding(6) var<storage, read_write> block_meta: array<u32>;

var<workgroup> head_out: array<f32, 1024>;

fn emit(h: u32, lid: u32, acc: array<f32, 4>, l: f32) {
    for (var j = 0u; j < 4u; j++) {
        let d = lid + 256u * j;
        if d < HEAD_DIM_V {
            head_out[d] = acc[j] / l;
        }
    }
    workgroupBarrier();
    let blocks = HEAD_DIM_V / 32u;
    if lid < blocks {
        var v: array<f32, 32>;
        for (var j = 0u; j < 32u; j++) {
            v[j] = head_out[32u * lid + j];
        }
        store_q8_0_block(h * blocks + lid, &v);
    }
}
