// The Q1_0 product's activation made by its own workgroup (q1_0_gemv.wgsl's interface): the RMS
// norm of the N-value f32 row `x` times the norm weight `w`, quantized to Q8_0 into workgroup
// memory in the layout `quantize` writes (byte L of word i = code 8L + i of the block; per block
// the f16-rounded d and Σ codes) — rms_norm_quantize.wgsl's bits: the scale from rms_scale.wgsl's
// tree, each value `(x · scale) · w`, and q8_0_block_wg.wgsl's block arithmetic (the largest
// magnitude, d = amax / 127 and its inverse correctly rounded, each code rounded and clamped, Σ
// codes) — a maximum and an integer sum do not depend on their order, so the block's largest
// magnitude comes from atomic maxima of the magnitudes' bits (non-negative floats order as their
// bits) and Σ codes from atomic adds, a few barriers for the whole row instead of a tree a block.
// Every workgroup of the product does this (each reads the row, from cache after the first), so
// the product needs no quantized tensor and no dispatch before it.

override N: u32;
override EPS: f32;
// The widest row (fused.rs's `PROLOGUE_MAX_N`): the arrays below are sized for it — fixed sizes,
// as naga 30 fails on workgroup arrays sized by an override — 1.5 bytes a value, 10.5 KiB, which
// with the norm's and the product's 5 KiB fits WebGPU's guaranteed 16 KiB.
const MAX_N: u32 = 7168u;

@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;

// Value i of the row rms_scale.wgsl norms.
fn rms_in(i: u32) -> f32 {
    return x[i];
}

// The codes, four to a word, four words to an element (the product loads 16 bytes at a time).
var<workgroup> act_codes: array<vec4<u32>, MAX_N / 16u>;
// Per block: d as f32 bits, then Σ codes (during the build: the unrounded d, then 1 / d); two
// blocks to an element.
var<workgroup> act_block: array<vec4<u32>, MAX_N / 64u>;
var<workgroup> block_amax: array<atomic<u32>, MAX_N / 32u>;
var<workgroup> block_total: array<atomic<i32>, MAX_N / 32u>;

fn normed(at: u32, scale: f32) -> f32 {
    return (x[at] * scale) * w[at];
}

fn prologue(lid: u32) {
    let scale = rms_scale(0u, lid);
    let n_blocks = N / 32u;
    for (var j = lid; j < n_blocks; j += 256u) {
        atomicStore(&block_amax[j], 0u);
        atomicStore(&block_total[j], 0);
    }
    workgroupBarrier();
    // Word k of block j holds codes 8L + k, L = 0 .. 3: an invocation a word.
    for (var i = lid; i < N / 4u; i += 256u) {
        let first = 32u * (i / 8u) + i % 8u;
        var m = 0u;
        for (var l = 0u; l < 4u; l++) {
            m = max(m, bitcast<u32>(abs(normed(first + 8u * l, scale))));
        }
        atomicMax(&block_amax[i / 8u], m);
    }
    workgroupBarrier();
    for (var j = lid; j < n_blocks; j += 256u) {
        let amax = bitcast<f32>(atomicLoad(&block_amax[j]));
        var d = 0.0;
        var id = 0.0;
        if amax >= bitcast<f32>(0x0d800000u) {
            d = div_exact(amax, 127.0);
            id = div_exact(127.0, amax);
        }
        act_block[j / 2u][2u * (j % 2u)] = bitcast<u32>(d);
        act_block[j / 2u][2u * (j % 2u) + 1u] = bitcast<u32>(id);
    }
    workgroupBarrier();
    for (var i = lid; i < N / 4u; i += 256u) {
        let j = i / 8u;
        let first = 32u * j + i % 8u;
        let id = bitcast<f32>(act_block[j / 2u][2u * (j % 2u) + 1u]);
        var word = 0u;
        var total = 0i;
        for (var l = 0u; l < 4u; l++) {
            let code = i32(clamp(round(normed(first + 8u * l, scale) * id), -128.0, 127.0));
            word |= (bitcast<u32>(code) & 0xffu) << (8u * l);
            total += code;
        }
        act_codes[i / 4u][i % 4u] = word;
        atomicAdd(&block_total[j], total);
    }
    workgroupBarrier();
    for (var j = lid; j < n_blocks; j += 256u) {
        let d = bitcast<f32>(act_block[j / 2u][2u * (j % 2u)]);
        act_block[j / 2u][2u * (j % 2u)] = bitcast<u32>(f16_value(f16_bits(d)));
        // Q8_0's second word, Σ codes (q8_0_meta.wgsl's; not `q8_second`, which an epilogue
        // may join as Q8_1's for its own output).
        act_block[j / 2u][2u * (j % 2u) + 1u] = bitcast<u32>(atomicLoad(&block_total[j]));
    }
    workgroupBarrier();
}

fn act_word(i: u32) -> vec4<u32> {
    return act_codes[i];
}

fn act_meta_word(i: u32) -> vec4<u32> {
    return act_block[i];
}
