// attention_decode.wgsl's inputs with RoPE and the KV store fused in: `qkv` is a stacked Q/K/V
// product's output (N_HEAD query heads of HEAD_DIM, N_HEAD_KV key heads of HEAD_DIM, N_HEAD_KV
// value heads of HEAD_DIM_V), not yet rotated. Each workgroup rotates its query head and its key
// head into workgroup memory (rope_pair.wgsl, rope.wgsl's arithmetic) and keeps the value head,
// key and value as the cache would hold them (rounded to f16 for an f16 cache); the first query
// head of each group, in the chunk holding the token's position (the last), also stores them in
// the cache at `step[0]` (as kv_store.wgsl, not past N_CTX). The token's own position is read
// from workgroup memory, earlier ones from the cache, so no workgroup reads a row another is
// writing: the bits of rope, rope, store_kv, attention over the same chunks. The workgroup that
// stores a key head also hands its rotated f32 values to `keep_key` (fresh_keys_out.wgsl writes
// them to a tensor, fresh_keys_none.wgsl drops them). The query and key heads are read through
// `norm_qk` and `rope_in`: as they are (fresh_qk_as_is.wgsl), or with Qwen3's per-head norms
// (fresh_qk_norm.wgsl: the bits of rms_norm_qk before this dispatch).

override PAIRS: u32;
override NEOX: bool;

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(2) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(7) var<storage, read> cos_sin: array<vec2<f32>>;

// The head dimensions this input takes (attention.rs checks them).
const FRESH_MAX: u32 = 512u;
var<workgroup> q_rot: array<f32, FRESH_MAX>;
var<workgroup> fresh_k: array<f32, FRESH_MAX>;
var<workgroup> fresh_v: array<f32, FRESH_MAX>;

fn as_stored(x: f32) -> f32 {
    if KV_F16 {
        return f16_value(f16_bits(x));
    }
    return x;
}

fn prepare(h: u32, g: u32, lid: u32, last_chunk: bool) {
    let kb = N_HEAD * HEAD_DIM + g * HEAD_DIM;
    let vb = N_HEAD * HEAD_DIM + N_HEAD_KV * HEAD_DIM + g * HEAD_DIM_V;
    // GQA-packed (attention_decode.wgsl's GQA_PACK, h the group's first head): the group's query
    // heads side by side in `q_rot` (attention.rs packs only groups that fit FRESH_MAX).
    let heads = select(1u, N_HEAD / N_HEAD_KV, GQA_PACK);
    for (var e = 0u; e < heads; e++) {
        if e > 0u {
            // Every invocation has read the previous head's norm factors before the tree is reused.
            workgroupBarrier();
        }
        norm_qk(h + e, g, lid);
        for (var i = lid; i < HEAD_DIM; i += 256u) {
            q_rot[e * HEAD_DIM + i] = rotated((h + e) * HEAD_DIM, i);
        }
    }
    for (var i = lid; i < HEAD_DIM; i += 256u) {
        fresh_k[i] = as_stored(rotated(kb, i));
    }
    for (var d = lid; d < HEAD_DIM_V; d += 256u) {
        fresh_v[d] = as_stored(qkv[vb + d]);
    }
    let pos = step[0];
    if last_chunk && h % (N_HEAD / N_HEAD_KV) == 0u {
        for (var i = lid; i < HEAD_DIM; i += 256u) {
            keep_key(g * HEAD_DIM + i, rotated(kb, i));
        }
    }
    if last_chunk && h % (N_HEAD / N_HEAD_KV) == 0u && pos < N_CTX {
        if KV_F16 {
            let kw = (g * N_CTX + pos) * (HEAD_DIM / 2u);
            for (var p = lid; p < HEAD_DIM / 2u; p += 256u) {
                k_cache[kw + p] = f16_bits(rotated(kb, 2u * p))
                    | (f16_bits(rotated(kb, 2u * p + 1u)) << 16u);
            }
            let vw = (g * N_CTX + pos) * (HEAD_DIM_V / 2u);
            for (var p = lid; p < HEAD_DIM_V / 2u; p += 256u) {
                v_cache[vw + p] = f16_bits(qkv[vb + 2u * p]) | (f16_bits(qkv[vb + 2u * p + 1u]) << 16u);
            }
        } else {
            for (var i = lid; i < HEAD_DIM; i += 256u) {
                k_cache[(g * N_CTX + pos) * HEAD_DIM + i] = bitcast<u32>(rotated(kb, i));
            }
            for (var d = lid; d < HEAD_DIM_V; d += 256u) {
                v_cache[(g * N_CTX + pos) * HEAD_DIM_V + d] = bitcast<u32>(qkv[vb + d]);
            }
        }
    }
    workgroupBarrier();
}

fn query(h: u32, i: u32) -> f32 {
    if GQA_PACK {
        return q_rot[(h % (N_HEAD / N_HEAD_KV)) * HEAD_DIM + i];
    }
    return q_rot[i];
}

fn key(g: u32, t: u32, i: u32) -> f32 {
    if t == step[0] {
        return fresh_k[i];
    }
    return unpack(k_cache[cache_word(g, t, i, HEAD_DIM)], i);
}

fn value(g: u32, t: u32, d: u32) -> f32 {
    if t == step[0] {
        return fresh_v[d];
    }
    return unpack(v_cache[cache_word(g, t, d, HEAD_DIM_V)], d);
}
