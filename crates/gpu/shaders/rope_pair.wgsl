// Value j of the head starting at `base` of `qkv`, rotated by `cos_sin` (the including shader
// declares both, and PAIRS / NEOX): rope.wgsl's pair arithmetic, the same expressions. The values
// are read through the including shader's `rope_in(at)`: `qkv[at]`, or that value normed
// (fresh_qk_norm.wgsl).
fn rotated(base: u32, j: u32) -> f32 {
    if j >= 2u * PAIRS {
        return rope_in(base + j);
    }
    var a: u32;
    var b: u32;
    var i: u32;
    if NEOX {
        i = j % PAIRS;
        a = i;
        b = i + PAIRS;
    } else {
        i = j / 2u;
        a = 2u * i;
        b = a + 1u;
    }
    let cs = cos_sin[i];
    let x0 = rope_in(base + a);
    let x1 = rope_in(base + b);
    if j == a {
        return x0 * cs.x - x1 * cs.y;
    }
    return x0 * cs.y + x1 * cs.x;
}

