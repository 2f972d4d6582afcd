// A 32-value block's second meta word for Q8_0: Σ codes (the products' Σ q for an offset).
// One of q8_0_meta.wgsl / q8_1_meta.wgsl is joined before q8_0_block.wgsl or q8_0_block_wg.wgsl,
// so the one block quantization writes either partner.
fn q8_second(total: i32, d: f32) -> u32 {
    return bitcast<u32>(total);
}
