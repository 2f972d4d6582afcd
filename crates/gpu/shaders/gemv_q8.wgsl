// Q8_0 / Q4_0 weights × a Q8_0 activation (as `quantize_q8_0` leaves it), one token:
// out[row] = Σ_blocks d_w · d_a · Σ w·q, the integer part by packed 4×8-bit dot products.
//
// Weights are repacked at upload to the activation's code order (byte L of word i = value 8L + i):
// Q8_0 as 8 such words a block; Q4_0 as 4 words a block, word m holding in its low nibbles the
// codes of word 2m and in its high nibbles those of word 2m + 1 (codes 0..15; Σ (c − 8)·q =
// Σ c·q − 8 · Σ q, with Σ q from the activation). Block scales apart, as f16 pairs.
// Eight rows per workgroup, 32 invocations a row, each taking every 32nd block.

override N_ROWS: u32;
override N_BLOCKS: u32;
override Q4: bool;

@group(0) @binding(0) var<storage, read> qs: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> act: array<u32>;
@group(0) @binding(3) var<storage, read> act_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let lane = lid % 32u;
    let row = (wid.x + wid.y * nwg.x) * 8u + lid / 32u;
    var acc = 0.0;
    if row < N_ROWS {
        for (var blk = lane; blk < N_BLOCKS; blk += 32u) {
            let at = row * N_BLOCKS + blk;
            let a = 8u * blk;
            var s = 0i;
            if Q4 {
                for (var m = 0u; m < 4u; m++) {
                    let wq = qs[4u * at + m];
                    s += dot4I8Packed(wq & 0x0f0f0f0fu, act[a + 2u * m]);
                    s += dot4I8Packed((wq >> 4u) & 0x0f0f0f0fu, act[a + 2u * m + 1u]);
                }
                s -= 8i * bitcast<i32>(act_meta[2u * blk + 1u]);
            } else {
                for (var i = 0u; i < 8u; i++) {
                    s += dot4I8Packed(qs[8u * at + i], act[a + i]);
                }
            }
            let pair = scales[at / 2u];
            let dw = f16_value(select(pair & 0xffffu, pair >> 16u, (at & 1u) == 1u));
            acc += f32(s) * (dw * bitcast<f32>(act_meta[2u * blk]));
        }
    }
    part[lid] = acc;
    workgroupBarrier();
    for (var off = 16u; off > 0u; off >>= 1u) {
        if lane < off {
            part[lid] += part[lid + off];
        }
        workgroupBarrier();
    }
    if lane == 0u && row < N_ROWS {
        out[row] = part[lid];
    }
}
