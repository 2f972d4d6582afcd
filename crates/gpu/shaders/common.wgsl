// Helpers every shader is compiled with (ops.rs prepends this file).

// f32 → f16 bits, to nearest even (the `half` crate's conversion, subnormals included; WGSL
// leaves the rounding of its own conversions to the implementation). Finite input.
fn f16_bits(v: f32) -> u32 {
    let sign = (bitcast<u32>(v) >> 16u) & 0x8000u;
    return sign | f16_magnitude(bitcast<u32>(v) & 0x7fffffffu);
}

fn f16_magnitude(b: u32) -> u32 {
    let exp = i32((b >> 23u) & 0xffu);
    let man = b & 0x7fffffu;
    let e = exp - 112;
    if e >= 31 {
        return 0x7c00u;
    }
    if e <= 0 {
        if e < -10 {
            return 0u;
        }
        let full = man | 0x800000u;
        let shift = u32(14 - e);
        var m = full >> shift;
        let rem = full & ((1u << shift) - 1u);
        let halfway = 1u << (shift - 1u);
        if rem > halfway || (rem == halfway && (m & 1u) == 1u) {
            m += 1u;
        }
        return m;
    }
    var h = (u32(e) << 10u) | (man >> 13u);
    let rem = man & 0x1fffu;
    if rem > 0x1000u || (rem == 0x1000u && (h & 1u) == 1u) {
        h += 1u;
    }
    return h;
}

// f16 bits → f32, exactly (subnormals by an exact power-of-two product: a device may flush
// them in `unpack2x16float`).
fn f16_value(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    return bitcast<f32>(sign | bitcast<u32>(f16_positive(h & 0x7fffu)));
}

fn f16_positive(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0u {
        return f32(m) * bitcast<f32>(0x33800000u);
    }
    if e == 31u {
        return bitcast<f32>(0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
}

// a / b rounded to nearest even, for positive normal a, b with a normal quotient.
fn div_exact(a: f32, b: f32) -> f32 {
    let ab = bitcast<u32>(a);
    let bb = bitcast<u32>(b);
    let ma = (ab & 0x7fffffu) | 0x800000u;
    let mb = (bb & 0x7fffffu) | 0x800000u;
    var e = i32(ab >> 23u) - i32(bb >> 23u) + 127;
    // q = floor(ma / mb · 2^25): 26 bits, ma / mb in (1/2, 2).
    var r = ma;
    var q = 0u;
    for (var i = 0u; i < 26u; i++) {
        q <<= 1u;
        if r >= mb {
            r -= mb;
            q |= 1u;
        }
        r <<= 1u;
    }
    var mant: u32;
    var round_bit: u32;
    var sticky = r != 0u;
    if q >= (1u << 25u) {
        mant = q >> 2u;
        round_bit = (q >> 1u) & 1u;
        sticky = sticky || (q & 1u) != 0u;
    } else {
        mant = q >> 1u;
        round_bit = q & 1u;
        e -= 1;
    }
    if round_bit == 1u && (sticky || (mant & 1u) == 1u) {
        mant += 1u;
        if mant == (1u << 24u) {
            mant >>= 1u;
            e += 1;
        }
    }
    if e <= 0 {
        // Below f32's normal range: its f16 is zero either way.
        return 0.0;
    }
    return bitcast<f32>((u32(e) << 23u) | (mant & 0x7fffffu));
}
