// A 32-value block's second meta word for Q8_1: s = f16(Σ codes · d), d the unrounded amax / 127
// (an exact product: one f32 rounding, as the CPU's `sum as f32 * d`, then f32 → f16 to nearest
// even), widened to f32 — `q8_1::quantize_activation`'s s. Q4_1 / Q5_1 read it for their offset.
fn q8_second(total: i32, d: f32) -> u32 {
    return bitcast<u32>(f16_value(f16_bits(f32(total) * d)));
}
