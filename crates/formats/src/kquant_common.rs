//! What the K-quants with a per-sub-block minimum share: ggml's `make_qkx2_quants` search (a
//! scale and a minimum for one group of values), the 12-byte packing of eight 6-bit scales and
//! eight 6-bit minimums that Q4_K and Q5_K store (`get_scale_min_k4`), their common super-block
//! quantizer and the integer core of their dot products with Q8_K.
//!
//! Everything here reproduces the reference's f32 arithmetic operation by operation (no fused
//! multiply-add: the reference quantizers are built for baseline x86-64), because the search picks
//! among candidates by comparing rounded errors and the chosen bytes depend on every rounding.

use crate::common::{nearest_int, F16Le};
use crate::q8_k::{BlockQ8_K, QK_K};

/// The largest group [`make_qkx2_quants`] handles (Q4_K / Q5_K use 32, Q2_K 16).
pub(crate) const MAX_GROUP: usize = 32;

/// The tuning of one [`make_qkx2_quants`] search, as each reference quantizer passes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Qkx2Search {
    /// Largest code: codes are `0..=nmax`.
    pub nmax: u8,
    /// Candidate `s` (for `s = 0..=nstep`) tries the inverse scale `(rmin + rdelta·s + nmax) / (max − min)`.
    pub rmin: f32,
    pub rdelta: f32,
    /// Number of refinement steps; 0 keeps the plain min/max scale.
    pub nstep: u32,
    /// Weigh absolute errors (`true`, Q2_K) instead of squared errors.
    pub use_mad: bool,
}

/// ggml's `make_qkx2_quants` for one group `x` (at most [`MAX_GROUP`] values) with per-value
/// `weights`: finds `scale` and `min_offset` so that `x[i] ≈ scale·codes[i] − min_offset`,
/// `codes[i]` in `0..=search.nmax`, minimising the weighted (squared or absolute) error over the
/// plain min/max fit and `nstep + 1` least-squares refinements. Writes the codes of the best fit
/// into `codes` and returns `(scale, min_offset)`; `min_offset ≥ 0` (the group's minimum is
/// never taken above zero). A constant group gets scale 0 and all-zero codes.
///
/// Panics when the three slices differ in length or exceed [`MAX_GROUP`] (a caller's bug).
pub(crate) fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    codes: &mut [u8],
    search: &Qkx2Search,
) -> (f32, f32) {
    let n = x.len();
    assert!(
        n > 0 && n <= MAX_GROUP && weights.len() == n && codes.len() == n,
        "make_qkx2_quants: {n} values, {} weights, {} codes (at most {MAX_GROUP})",
        weights.len(),
        codes.len()
    );
    let nmax = i32::from(search.nmax);
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        codes.fill(0);
        return (0.0, -min);
    }
    let error = |scale: f32, min: f32, codes: &[u8]| {
        let mut total = 0.0f32;
        for ((&v, &w), &l) in x.iter().zip(weights).zip(codes) {
            let diff = scale * f32::from(l) + min - v;
            let diff = if search.use_mad {
                diff.abs()
            } else {
                diff * diff
            };
            total += w * diff;
        }
        total
    };
    let fill = |iscale: f32, min: f32, codes: &mut [u8]| {
        for (c, &v) in codes.iter_mut().zip(x) {
            *c = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
        }
    };

    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    fill(iscale, min, codes);
    let mut best_error = error(scale, min, codes);
    if search.nstep == 0 {
        return (scale, -min);
    }
    let mut aux = [0u8; MAX_GROUP];
    let aux = &mut aux[..n];
    for is in 0..=search.nstep {
        iscale = (search.rmin + search.rdelta * is as f32 + nmax as f32) / (max - min);
        fill(iscale, min, aux);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((&v, &w), &l) in x.iter().zip(weights).zip(aux.iter()) {
            let l = f32::from(l);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur_error = error(this_scale, this_min, aux);
            if cur_error < best_error {
                codes.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and 6-bit minimum of sub-block `j` (0..8). Bytes
/// 0..4 hold scales 0..4, bytes 4..8 minimums 0..4 (low 6 bits each); bytes 8..12 hold the low
/// nibbles of scales 4..8 (low) and minimums 4..8 (high), whose top two bits sit in the spare top
/// bits of bytes 0..4 (scales) and 4..8 (minimums).
#[inline]
pub(crate) fn scale_min(packed: &[u8; 12], j: usize) -> (u8, u8) {
    if j < 4 {
        (packed[j] & 63, packed[j + 4] & 63)
    } else {
        (
            (packed[j + 4] & 0xf) | ((packed[j - 4] >> 6) << 4),
            (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and minimums (values above 63 lose their top bits), the inverse of
/// [`scale_min`].
pub(crate) fn pack_scale_min(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for j in 0..8 {
        let (ls, lm) = (scales[j], mins[j]);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    packed
}

/// One Q4_K / Q5_K super-block before its codes are bit-packed.
pub(crate) struct SuperBlock {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; 12],
    /// One code per value, `0..=nmax`, in value order.
    pub codes: [u8; QK_K],
}

/// The shared body of `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref` for one super-block of
/// 256 values: per sub-block of 32, weights `rms + |x|` and a [`make_qkx2_quants`] fit; the eight
/// scales and eight minimums quantized to 6 bits against their largest (`d = max/63`,
/// `dmin = max_min/63`); then every value re-rounded against its quantized scale and minimum —
/// except in a sub-block whose quantized scale is 0, which keeps the search's codes.
pub(crate) fn quantize_super_block(x: &[f32], search: &Qkx2Search) -> SuperBlock {
    assert_eq!(x.len(), QK_K, "a K-quant super-block holds {QK_K} values");
    let mut codes = [0u8; QK_K];
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    let mut weights = [0.0f32; 32];
    for (((xs, ls), scale), min) in x
        .chunks_exact(32)
        .zip(codes.chunks_exact_mut(32))
        .zip(&mut scales)
        .zip(&mut mins)
    {
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        (*scale, *min) = make_qkx2_quants(xs, &weights, ls, search);
        if *scale > max_scale {
            max_scale = *scale;
        }
        if *min > max_min {
            max_min = *min;
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // The reference stores nearest_int's result in a uint8_t before capping it at 63.
    let six_bits = |v: f32| (nearest_int(v) as u8).min(63);
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        ls[j] = six_bits(inv_scale * scales[j]);
        lm[j] = six_bits(inv_min * mins[j]);
    }
    let packed = pack_scale_min(&ls, &lm);
    let d = F16Le::from_f32(max_scale / 63.0);
    let dmin = F16Le::from_f32(max_min / 63.0);

    let nmax = i32::from(search.nmax);
    for (j, (xs, ls)) in x
        .chunks_exact(32)
        .zip(codes.chunks_exact_mut(32))
        .enumerate()
    {
        let (sc, m) = scale_min(&packed, j);
        let dl = d.to_f32() * f32::from(sc);
        if dl == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * f32::from(m);
        for (c, &v) in ls.iter_mut().zip(xs) {
            *c = nearest_int((v + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    SuperBlock {
        d,
        dmin,
        scales: packed,
        codes,
    }
}

/// `ggml_vec_dot_q{4,5}_K_q8_K` for one block pair, given the weight block's codes (value order,
/// unsigned): Σ per sub-block of `scale·Σ code·q8` into eight integer lanes (lane = position within
/// each 8 values) scaled by `d·y.d` into `lanes`, and `dmin·y.d · Σ bsums·min` subtracted from
/// `sumf`. The minimum term uses the activation's stored `bsums`, as the reference does.
pub(crate) fn dot_block(
    codes: &[u8; QK_K],
    packed: &[u8; 12],
    d: F16Le,
    dmin: F16Le,
    y: &BlockQ8_K,
    lanes: &mut [f32; 8],
    sumf: &mut f32,
) {
    let mut sumi = 0i32;
    for (j, sum) in y.bsums.iter().enumerate() {
        let (_, m) = scale_min(packed, j / 2);
        sumi += i32::from(sum.to_i16()) * i32::from(m);
    }
    let mut aux = [0i32; 8];
    for (j, (qs, q8)) in codes
        .chunks_exact(32)
        .zip(y.qs.chunks_exact(32))
        .enumerate()
    {
        let (sc, _) = scale_min(packed, j);
        for (k, (&a, &b)) in qs.iter().zip(q8).enumerate() {
            aux[k % 8] += i32::from(sc) * (i32::from(a) * i32::from(b));
        }
    }
    let yd = y.d.to_f32();
    let dd = d.to_f32() * yd;
    for (s, &a) in lanes.iter_mut().zip(&aux) {
        *s += dd * a as f32;
    }
    let dm = dmin.to_f32() * yd;
    *sumf -= dm * sumi as f32;
}

/// A block of the Q4_K family (Q4_K, Q5_K): unsigned codes under eight 6-bit scales and minimums
/// packed in 12 bytes and two f16 super-scales. Everything but the code layout is shared.
pub(crate) trait ScaleMinBlock: bytemuck::Pod {
    /// The codes of the block, in value order.
    fn codes(&self) -> [u8; QK_K];
    fn packed(&self) -> &[u8; 12];
    /// (d, dmin).
    fn super_scales(&self) -> (F16Le, F16Le);
}

/// `dequantize_row_q{4,5}_K` for one block: `d·scale·code − dmin·min`.
pub(crate) fn dequantize_scale_min<B: ScaleMinBlock>(b: &B, y: &mut [f32]) {
    let (d, dmin) = b.super_scales();
    let (d, min) = (d.to_f32(), dmin.to_f32());
    for (j, (ys, ls)) in y
        .chunks_exact_mut(32)
        .zip(b.codes().chunks_exact(32))
        .enumerate()
    {
        let (sc, m) = scale_min(b.packed(), j);
        let dl = d * f32::from(sc);
        let ml = min * f32::from(m);
        for (out, &l) in ys.iter_mut().zip(ls) {
            *out = dl * f32::from(l) - ml;
        }
    }
}

/// `ggml_vec_dot_q{4,5}_K_q8_K`: per block [`dot_block`] into eight lanes, summed at the end.
pub(crate) fn dot_scale_min<B: ScaleMinBlock>(weights: &[u8], activation: &[u8]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut sumf = 0.0f32;
    for (x, y) in crate::common::dot_pairs::<B, BlockQ8_K>(weights, activation, 1) {
        let (d, dmin) = x.super_scales();
        dot_block(
            &x.codes(),
            x.packed(),
            d,
            dmin,
            &y[0],
            &mut lanes,
            &mut sumf,
        );
    }
    for l in lanes {
        sumf += l;
    }
    sumf
}

/// Checks shared by the K-quant codecs' unit tests.
#[cfg(test)]
pub(crate) mod codec_tests {
    use super::QK_K;
    use crate::q8_k;
    use crate::QuantizeFn;

    /// A deterministic spread of values in [-1, 1) (xorshift).
    pub(crate) fn values(n: usize, mut state: u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// The dot equals the f64 product of the dequantized values (only float summation may
    /// differ), every value of a uniform spread in [-1, 1) is reconstructed within `max_error`
    /// (about one code step), and an all-zero block is all-zero bytes.
    pub(crate) fn check_codec(
        quantize: QuantizeFn,
        dequantize: fn(&[u8], &mut [f32]),
        dot: fn(&[u8], &[u8]) -> f32,
        block_bytes: usize,
        max_error: f32,
    ) {
        let n = 4 * QK_K;
        let w = values(n, 0x9e37_79b9_7f4a_7c15);
        let a = values(n, 0x2545_f491_4f6c_dd1d);
        let mut wq = vec![0u8; n / QK_K * block_bytes];
        let mut aq = vec![0u8; n / QK_K * 292];
        quantize(&w, &mut wq);
        q8_k::quantize(&a, &mut aq);
        let (mut wd, mut ad) = (vec![0f32; n], vec![0f32; n]);
        dequantize(&wq, &mut wd);
        q8_k::dequantize(&aq, &mut ad);
        let exact: f64 = wd
            .iter()
            .zip(&ad)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum();
        let abs_sum: f64 = wd
            .iter()
            .zip(&ad)
            .map(|(&x, &y)| f64::from(x * y).abs())
            .sum();
        let ours = f64::from(dot(&wq, &aq));
        assert!(
            (ours - exact).abs() <= 1e-5 * abs_sum + 1e-6,
            "dot {ours} vs dequantized {exact}"
        );
        let err = w
            .iter()
            .zip(&wd)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(err < max_error, "worst reconstruction error {err}");
        let mut out = vec![0xffu8; block_bytes];
        quantize(&[0.0; QK_K], &mut out);
        assert_eq!(out, vec![0u8; block_bytes], "an all-zero block");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_packing_round_trips_every_6_bit_pair() {
        for seed in 0..64u8 {
            let scales: [u8; 8] = std::array::from_fn(|j| (seed + 7 * j as u8) % 64);
            let mins: [u8; 8] = std::array::from_fn(|j| (63 - seed + 13 * j as u8) % 64);
            let packed = pack_scale_min(&scales, &mins);
            for j in 0..8 {
                assert_eq!(
                    scale_min(&packed, j),
                    (scales[j], mins[j]),
                    "seed {seed} j {j}"
                );
            }
        }
    }

    #[test]
    fn qkx2_fits_an_exact_grid_exactly() {
        // Values on the grid 0.25·k − 1 (k = 0..=15): the plain fit is already exact.
        let x: [f32; 32] = std::array::from_fn(|i| 0.25 * (i % 16) as f32 - 1.0);
        let w = [1.0f32; 32];
        let mut codes = [0u8; 32];
        let search = Qkx2Search {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        let (scale, min) = make_qkx2_quants(&x, &w, &mut codes, &search);
        for (i, (&c, &v)) in codes.iter().zip(&x).enumerate() {
            assert_eq!(scale * f32::from(c) - min, v, "value {i}");
        }
    }

    #[test]
    fn qkx2_constant_and_positive_groups() {
        let search = Qkx2Search {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        let mut codes = [9u8; 16];
        // A constant negative group: scale 0, the offset carries the value.
        assert_eq!(
            make_qkx2_quants(&[-2.0; 16], &[1.0; 16], &mut codes, &search),
            (0.0, 2.0)
        );
        assert_eq!(codes, [0; 16]);
        // All positive: the minimum is held at zero, so the offset is zero.
        let x: [f32; 16] = std::array::from_fn(|i| 1.0 + i as f32);
        let (scale, min) = make_qkx2_quants(&x, &x, &mut codes, &search);
        assert_eq!(min, 0.0);
        assert!(scale > 0.0);
        assert_eq!(codes[15], 3);
    }
}
