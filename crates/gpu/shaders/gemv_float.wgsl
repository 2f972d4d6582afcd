// F32 / F16 / BF16 weights × an f32 activation, one token: out[row] = Σ w·x. F16 and BF16 follow
// the CPU's products: the activation rounded to the weights' type first (to nearest even), so each
// product is exact in f32. Eight rows per workgroup, 32 invocations a row striding over it, their
// sums meeting in a tree. F16 / BF16 rows are stored as u32 pairs, each row padded to an even
// count.

override N_ROWS: u32;
override N_IN: u32;
override F16: bool;
override BF16: bool = false;

// A 16-bit value of the row's type, widened exactly.
fn half_value(h: u32) -> f32 {
    if BF16 {
        return bitcast<f32>(h << 16u);
    }
    return f16_value(h);
}

// v rounded to the row's 16-bit type, to nearest even (finite v), widened back.
fn half_round(v: f32) -> f32 {
    if BF16 {
        let b = bitcast<u32>(v);
        return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
    }
    return f16_value(f16_bits(v));
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// Row `row`'s share of invocation `lane` (of 32) for token `tok` (gemv_rows.wgsl / gemm_rows.wgsl add
// the shares).
fn row_share(row: u32, lane: u32, tok: u32) -> f32 {
    // Token `tok`'s activation (a gemm's are back to back).
    let xo = tok * N_IN;
    var acc = 0.0;
    if F16 || BF16 {
        let stride = (N_IN + 1u) / 2u;
        for (var p = lane; p < stride; p += 32u) {
            let pair = w[row * stride + p];
            let i = 2u * p;
            acc += half_value(pair & 0xffffu) * half_round(x[xo + i]);
            if i + 1u < N_IN {
                acc += half_value(pair >> 16u) * half_round(x[xo + i + 1u]);
            }
        }
    } else {
        for (var i = lane; i < N_IN; i += 32u) {
            acc += bitcast<f32>(w[row * N_IN + i]) * x[xo + i];
        }
    }
    return acc;
}
