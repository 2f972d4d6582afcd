// F16 weights × an f32 activation where the adapter has `shader-f16`: `gemv_float.wgsl`'s F16
// product with the weights read as f16 pairs (a conversion instruction instead of the integer
// decode). The activation is still rounded to f16 in integers (`f16_bits`): WGSL leaves the
// rounding of its own f32 → f16 conversion to the device, and the CPU rounds to nearest even.

override N_ROWS: u32;
override N_IN: u32;

@group(0) @binding(0) var<storage, read> w: array<vec2<f16>>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// One invocation's share of a row (the walk: gemv_rows.wgsl).
fn row_share(row: u32, lane: u32, tok: u32) -> f32 {
    // Token `tok`'s activation (a gemm's are back to back).
    let xo = tok * N_IN;
    var acc = 0.0;
    let stride = (N_IN + 1u) / 2u;
    for (var p = lane; p < stride; p += 32u) {
        let pair = vec2<f32>(w[row * stride + p]);
        let i = 2u * p;
        acc += pair.x * f16_value(f16_bits(x[xo + i]));
        if i + 1u < N_IN {
            acc += pair.y * f16_value(f16_bits(x[xo + i + 1u]));
        }
    }
    return acc;
}
