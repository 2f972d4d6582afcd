// The attention output quantized to Q8_K for the output product (N_HEAD · HEAD_DIM_V a multiple
// of 256, at most 1024 blocks): a 256-value block spans heads (or a head spans blocks), which
// finish in any order in different workgroups, so each head's workgroup stages its f32 values
// (what attention_out_f32.wgsl writes) in `partials` and counts itself done on each block it
// touches; the one that completes a block — its count reaching the heads the block holds —
// resets the count and quantizes the block through q8_k_block_wg.wgsl's `store_wg`, reading the
// staged values: the bits of attention then quantize (quantize_wg.wgsl is the same piece). As with
// the partials, values and counts are atomics behind storageBarrier, so the completing workgroup
// sees the others' values.

@group(0) @binding(5) var<storage, read_write> words: array<u32>;
@group(0) @binding(6) var<storage, read_write> block_meta: array<u32>;

var<workgroup> block_done: u32;

fn emit(h: u32, lid: u32, acc: array<f32, 4>, l: f32) {
    for (var j = 0u; j < 4u; j++) {
        let d = lid + 256u * j;
        if d < HEAD_DIM_V {
            atomicStore(&partials[staged_at(h * HEAD_DIM_V + d)], bitcast<u32>(acc[j] / l));
        }
    }
    storageBarrier();
    let first_block = h * HEAD_DIM_V / 256u;
    let last_block = (h * HEAD_DIM_V + HEAD_DIM_V - 1u) / 256u;
    for (var b = first_block; b <= last_block; b++) {
        if lid == 0u {
            // The heads block b holds values of.
            let heads = (256u * b + 255u) / HEAD_DIM_V - 256u * b / HEAD_DIM_V + 1u;
            let count = atomicAdd(&partials[BLOCK_COUNTERS + b], 1u) + 1u;
            block_done = select(0u, 1u, count == heads);
        }
        if workgroupUniformLoad(&block_done) == 1u {
            storageBarrier();
            if lid == 0u {
                atomicStore(&partials[BLOCK_COUNTERS + b], 0u);
            }
            let v = bitcast<f32>(atomicLoad(&partials[staged_at(256u * b + lid)]));
            store_wg(256u * b, lid, v, true);
        }
        // `block_done` is read by all before the next block's count writes it.
        workgroupBarrier();
    }
}
