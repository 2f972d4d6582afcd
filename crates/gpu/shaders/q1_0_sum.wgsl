// Σ ±q of one 32-value Q1_0 word against its Q8_0 block (codes permuted: byte L of word i = code
// 8L + i): 2 · Σ_{bit set} q − Σ q. Shared by q1_0_gemv.wgsl and q1_0_gemm.wgsl.

fn signed_sum(b: u32, a0: vec4<u32>, a1: vec4<u32>, total: u32) -> f32 {
    var sel = dot4I8Packed(a0.x, b & 0x01010101u);
    sel += dot4I8Packed(a0.y, (b >> 1u) & 0x01010101u);
    sel += dot4I8Packed(a0.z, (b >> 2u) & 0x01010101u);
    sel += dot4I8Packed(a0.w, (b >> 3u) & 0x01010101u);
    sel += dot4I8Packed(a1.x, (b >> 4u) & 0x01010101u);
    sel += dot4I8Packed(a1.y, (b >> 5u) & 0x01010101u);
    sel += dot4I8Packed(a1.z, (b >> 6u) & 0x01010101u);
    sel += dot4I8Packed(a1.w, (b >> 7u) & 0x01010101u);
    return f32(2 * sel - bitcast<i32>(total));
}
