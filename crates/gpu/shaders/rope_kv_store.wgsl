// RoPE of one token's queries and keys fused with the KV store: `qkv` holds the Q/K/V products
// of a stacked matrix — N_HEAD query heads of HEAD_DIM, then N_HEAD_KV key heads of HEAD_DIM,
// then N_HEAD_KV value heads of HEAD_DIM_V. Queries are rotated in place (attention reads them
// there); keys are rotated on the way into the cache and values copied, at position `step[0]`
// (not stored past N_CTX), f32 or f16 pairs. The same expressions as rope.wgsl and kv_store.wgsl,
// so the same bits as rope, rope, store, store. One invocation per query pair, then per cache
// word of the keys, then of the values.

override N_HEAD: u32;
override N_HEAD_KV: u32;
override HEAD_DIM: u32;
override HEAD_DIM_V: u32;
override PAIRS: u32;
override NEOX: bool;
override N_CTX: u32;
override KV_F16: bool;

@group(0) @binding(0) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(1) var<storage, read> cos_sin: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;

// rope_pair.wgsl's input: the product's values as they are.
fn rope_in(at: u32) -> f32 {
    return qkv[at];
}

fn per_row(dim: u32) -> u32 {
    return select(dim, dim / 2u, KV_F16);
}

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    var k = gid.x + gid.y * nwg.x * 256u;
    let q_pairs = N_HEAD * PAIRS;
    if k < q_pairs {
        let i = k % PAIRS;
        let cs = cos_sin[i];
        var a = 2u * i;
        var b = 2u * i + 1u;
        if NEOX {
            a = i;
            b = i + PAIRS;
        }
        let base = (k / PAIRS) * HEAD_DIM;
        let x0 = qkv[base + a];
        let x1 = qkv[base + b];
        qkv[base + a] = x0 * cs.x - x1 * cs.y;
        qkv[base + b] = x0 * cs.y + x1 * cs.x;
        return;
    }
    k -= q_pairs;
    let pos = step[0];
    if pos >= N_CTX {
        return;
    }
    let k_row = per_row(HEAD_DIM);
    let k_base = N_HEAD * HEAD_DIM;
    if k < N_HEAD_KV * k_row {
        let g = k / k_row;
        let p = k % k_row;
        let head = k_base + g * HEAD_DIM;
        let at = (g * N_CTX + pos) * k_row + p;
        if KV_F16 {
            k_cache[at] = f16_bits(rotated(head, 2u * p))
                | (f16_bits(rotated(head, 2u * p + 1u)) << 16u);
        } else {
            k_cache[at] = bitcast<u32>(rotated(head, p));
        }
        return;
    }
    k -= N_HEAD_KV * k_row;
    let v_row = per_row(HEAD_DIM_V);
    if k < N_HEAD_KV * v_row {
        let g = k / v_row;
        let p = k % v_row;
        let src = k_base + N_HEAD_KV * HEAD_DIM + g * HEAD_DIM_V;
        let at = (g * N_CTX + pos) * v_row + p;
        if KV_F16 {
            v_cache[at] = f16_bits(qkv[src + 2u * p]) | (f16_bits(qkv[src + 2u * p + 1u]) << 16u);
        } else {
            v_cache[at] = bitcast<u32>(qkv[src + p]);
        }
    }
}
