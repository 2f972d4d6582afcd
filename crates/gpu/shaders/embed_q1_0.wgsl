// Embedding lookup from a Q1_0 table as `Q1Matrix` holds it (sign bits as 16-byte words a block,
// scales apart as f16 pairs): value j of a block is +d where its bit is set, else −d.

override TOKENS: u32;
override N: u32;

@group(0) @binding(0) var<storage, read> bits: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

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
    let block = ids[t] * (N / 128u) + i / 128u;
    let j = i % 128u;
    let word = bits[block * 4u + j / 32u];
    let pair = unpack2x16float(scales[block / 2u]);
    let d = select(pair.x, pair.y, (block & 1u) == 1u);
    out[k] = select(-d, d, ((word >> (j % 32u)) & 1u) == 1u);
}
