// The residual add with the next RMS norm in the product's idle tail (q1_0_gemv.wgsl's output
// interface): each workgroup adds its rows' sums to the residual row x (`x[row] += value`, the
// residual epilogue's one f32 addition; a row belongs to one workgroup, so the read-modify-write
// has no race), then counts itself done; the workgroup that counts last — every row of x final —
// resets the count and norms and quantizes the whole row into the next product's activation:
// rms_scale.wgsl's factor, each value `(x · scale) · w`, the joined block piece's `store_wg`
// (q8_0_block_wg.wgsl with q8_0_meta.wgsl or q8_1_meta.wgsl, q8_k_block_wg.wgsl) 256 values at a
// time — rms_norm_quantize.wgsl's expressions in its order, so the same bits, one dispatch fewer
// (the norm's own dispatch was one workgroup: almost all launch and latency). The pattern of
// attention_out_q8_k.wgsl and attention_decode.wgsl's done counts.
//
// Why atomics: WGSL's barriers are workgroup-scoped and a GPU's L1 caches are not coherent
// between workgroups, so a plain load in the last workgroup could see a stale line of a row
// another workgroup wrote. Atomics are device-coherent: x is declared `array<atomic<u32>>` here,
// written with atomicStore (f32 bits) and read with atomicLoad; storageBarrier before the count
// orders the workgroup's stores before its count, the one after it orders the count before the
// last workgroup's loads. The count is a word of a buffer the Gpu keeps, reset by the workgroup
// that completes it, so it is zero before every dispatch whatever the schedule. Every workgroup
// has read the activation before it counts (its sums, written before the count, depend on every
// load), so the tail may overwrite the activation the product read (q1_0_act_out.wgsl).

// The row's values (the product's rows; whole blocks of the partner format) and the norm's
// epsilon; the workgroups dispatched (at most 65,535: one dimension, none past the rows' tiles).
override N: u32;
override EPS: f32;
override GROUPS: u32;

@group(0) @binding(4) var<storage, read_write> x: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read> w: array<f32>;
@group(0) @binding(7) var<storage, read_write> words: array<u32>;
@group(0) @binding(8) var<storage, read_write> block_meta: array<u32>;
@group(0) @binding(9) var<storage, read_write> done: array<atomic<u32>>;

var<workgroup> tail_last: u32;

fn tile_row0(g: u32, tile: u32, tile_rows: u32) -> u32 {
    return (g * TILES + tile) * tile_rows;
}

fn emit(row: u32, local: u32, value: f32) {
    atomicStore(&x[row], bitcast<u32>(bitcast<f32>(atomicLoad(&x[row])) + value));
}

fn rms_in(i: u32) -> f32 {
    return bitcast<f32>(atomicLoad(&x[i]));
}

fn epilogue(lid: u32, g: u32) {
    storageBarrier();
    if lid == 0u {
        tail_last = select(0u, 1u, atomicAdd(&done[0], 1u) + 1u == GROUPS);
    }
    if workgroupUniformLoad(&tail_last) == 0u {
        return;
    }
    storageBarrier();
    if lid == 0u {
        atomicStore(&done[0], 0u);
    }
    let scale = rms_scale(0u, lid);
    for (var first = 0u; first < N; first += 256u) {
        let i = first + lid;
        let valid = i < N;
        var v = 0.0;
        if valid {
            v = (rms_in(i) * scale) * w[i];
        }
        store_wg(first, lid, v, valid);
    }
}
