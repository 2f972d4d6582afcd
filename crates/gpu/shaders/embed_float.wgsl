// Embedding lookup from an F32 or F16 table: row ids[t] of N values into out row t.
// F16 rows are stored as u32 pairs, each row padded to an even count.

override TOKENS: u32;
override N: u32;
override F16: bool;

@group(0) @binding(0) var<storage, read> table: array<u32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let k = gid.x + gid.y * nwg.x * 256u;
    if k >= TOKENS * N {
        return;
    }
    let t = k / N;
    let i = k % N;
    let row = ids[t];
    if F16 {
        let stride = (N + 1u) / 2u;
        let pair = unpack2x16float(table[row * stride + i / 2u]);
        out[k] = select(pair.x, pair.y, (i & 1u) == 1u);
    } else {
        out[k] = bitcast<f32>(table[row * N + i]);
    }
}
