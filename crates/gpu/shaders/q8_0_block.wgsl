// One 32-value block to Q8_0 (or Q8_1: the block's second meta word is `q8_second`'s, from
// q8_0_meta.wgsl or q8_1_meta.wgsl) as block `blk` of `words` / `block_meta` (the including shader
// declares both), bit for bit the CPU's `q8_0::quantize_activation` / `q8_1::quantize_activation`
// — see quantize_q8_0.wgsl for the rounding argument. Shared by the standalone quantization and
// the ops fused with it, so a fused op's codes are the unfused pair's.
fn store_q8_0_block(blk: u32, v: ptr<function, array<f32, 32>>) {
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        amax = max(amax, abs((*v)[j]));
    }
    var d = 0.0;
    var id = 0.0;
    if amax >= bitcast<f32>(0x0d800000u) {
        d = div_exact(amax, 127.0);
        id = div_exact(127.0, amax);
    }
    let dh = f16_bits(d);
    var total = 0i;
    for (var i = 0u; i < 8u; i++) {
        var word = 0u;
        for (var l = 0u; l < 4u; l++) {
            let q = i32(clamp(round((*v)[8u * l + i] * id), -128.0, 127.0));
            total += q;
            word |= (bitcast<u32>(q) & 0xffu) << (8u * l);
        }
        words[8u * blk + i] = word;
    }
    block_meta[2u * blk] = bitcast<u32>(f16_value(dh));
    block_meta[2u * blk + 1u] = q8_second(total, d);
}
