// One token's keys (or values) into the device cache at position `step[0]`: N_HEAD_KV heads of
// HEAD_DIM values to rows [g][pos] (N_CTX rows a head), kept f32 or rounded to f16 pairs (to
// nearest even, as the CPU cache's conversion does).

override N_HEAD_KV: u32;
override HEAD_DIM: u32;
override N_CTX: u32;
override KV_F16: bool;

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read_write> cache: array<u32>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let k = gid.x + gid.y * nwg.x * 256u;
    let pos = step[0];
    if pos >= N_CTX {
        return;
    }
    if KV_F16 {
        let per_head = HEAD_DIM / 2u;
        if k >= N_HEAD_KV * per_head {
            return;
        }
        let g = k / per_head;
        let p = k % per_head;
        let i = g * HEAD_DIM + 2u * p;
        cache[(g * N_CTX + pos) * per_head + p] = f16_bits(src[i]) | (f16_bits(src[i + 1u]) << 16u);
    } else {
        if k >= N_HEAD_KV * HEAD_DIM {
            return;
        }
        let g = k / HEAD_DIM;
        cache[(g * N_CTX + pos) * HEAD_DIM + k % HEAD_DIM] = bitcast<u32>(src[k]);
    }
}
