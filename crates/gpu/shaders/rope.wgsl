// RoPE in place on TOKENS rows of N_HEADS heads of HEAD_DIM values, the first 2·PAIRS values of
// each head rotated (partial rotary leaves the rest). `cos_sin` holds each token's PAIRS
// (cos, sin) pairs as the engine's `rope_angles` makes them; pair i rotates values (2i, 2i + 1)
// (normal) or (i, i + PAIRS) (NEOX), as the CPU backend does.

override TOKENS: u32;
override N_HEADS: u32;
override HEAD_DIM: u32;
override PAIRS: u32;
override NEOX: bool;

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> cos_sin: array<vec2<f32>>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let k = gid.x + gid.y * nwg.x * 256u;
    if k >= TOKENS * N_HEADS * PAIRS {
        return;
    }
    let i = k % PAIRS;
    let head = k / PAIRS;
    let token = head / N_HEADS;
    let cs = cos_sin[token * PAIRS + i];
    var a = 2u * i;
    var b = 2u * i + 1u;
    if NEOX {
        a = i;
        b = i + PAIRS;
    }
    let base = head * HEAD_DIM;
    let x0 = x[base + a];
    let x1 = x[base + b];
    x[base + a] = x0 * cs.x - x1 * cs.y;
    x[base + b] = x0 * cs.y + x1 * cs.x;
}
