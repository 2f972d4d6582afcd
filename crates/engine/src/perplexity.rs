//! Perplexity and KL divergence exactly as llama.cpp's `llama-perplexity` computes them, so the
//! numbers can be put side by side with the ones in model cards: the text in chunks of `n_ctx`
//! tokens, each from an empty state (BOS first when the vocabulary adds one), only the second
//! half of each chunk scored; the KL divergence against a saved base in llama.cpp's own
//! `--kl-divergence-base` file format (log-probabilities quantized to 16 bits per token), read and
//! written here bit for bit, so a base made by either engine serves the other.
//!
//! The arithmetic follows the reference's float / double mix on purpose (f32 maxima and
//! exponentials, f64 sums): the statistics then differ only by the logits themselves.

use std::io::{self, Read, Write};

use thiserror::Error;

#[derive(Error, Debug)]
pub enum PerplexityError {
    #[error(
        "the text has {tokens} tokens: at least {needed} (2 × the context of {n_ctx}) are needed"
    )]
    TooFewTokens {
        tokens: usize,
        needed: usize,
        n_ctx: usize,
    },
    #[error("a context of {n_ctx} tokens is too small to score (at least 4)")]
    ContextTooSmall { n_ctx: usize },
    #[error("the KL-divergence base is not a llama-perplexity log-probability file: {reason}")]
    BadBase { reason: String },
    #[error("the KL-divergence base does not fit this run: {reason}")]
    BaseMismatch { reason: String },
    #[error("cannot read or write the KL-divergence base: {0}")]
    Io(#[from] io::Error),
}

/// How a token list is cut into scored chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    pub n_ctx: usize,
    pub n_chunk: usize,
}

impl ChunkPlan {
    /// As many whole chunks as the text holds (at most `max_chunks`); the text must hold two.
    pub fn new(
        n_tokens: usize,
        n_ctx: usize,
        max_chunks: Option<usize>,
    ) -> Result<ChunkPlan, PerplexityError> {
        if n_ctx < 4 {
            return Err(PerplexityError::ContextTooSmall { n_ctx });
        }
        let needed = 2 * n_ctx;
        if n_tokens < needed {
            return Err(PerplexityError::TooFewTokens {
                tokens: n_tokens,
                needed,
                n_ctx,
            });
        }
        let all = n_tokens / n_ctx;
        Ok(ChunkPlan {
            n_ctx,
            n_chunk: max_chunks.map_or(all, |m| m.clamp(1, all)),
        })
    }

    /// The first position of a chunk whose logits are scored (each predicts the next token).
    pub fn first(&self) -> usize {
        self.n_ctx / 2
    }

    /// Scored tokens per chunk: positions `first .. n_ctx - 1` predict tokens `first + 1 ..`.
    pub fn scored_per_chunk(&self) -> usize {
        self.n_ctx - 1 - self.first()
    }

    /// The tokens chunk `i` is evaluated on: its slice of the text, the first one replaced by
    /// `bos` when the vocabulary adds one (the reference does the same).
    pub fn chunk(&self, tokens: &[u32], i: usize, bos: Option<u32>) -> Vec<u32> {
        let mut chunk = tokens[i * self.n_ctx..(i + 1) * self.n_ctx].to_vec();
        if let Some(bos) = bos {
            chunk[0] = bos;
        }
        chunk
    }
}

/// `-log p(token)` under the softmax of `logits`, as the reference's `log_softmax`.
pub fn token_nll(logits: &[f32], token: usize) -> f64 {
    let max = logits.iter().copied().fold(logits[0], f32::max);
    let sum_exp: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    -(((logits[token] - max) as f64) - sum_exp.ln())
}

/// Running sums of the negative log-likelihood.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nll {
    pub sum: f64,
    pub sum2: f64,
    pub count: usize,
}

impl Nll {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    /// e^(mean NLL).
    pub fn ppl(&self) -> f64 {
        (self.sum / self.count as f64).exp()
    }

    /// The standard error of the perplexity, as the reference's final estimate computes it
    /// (`None` where its variance estimate is not positive).
    pub fn ppl_error(&self) -> Option<f64> {
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = self.sum2 / n - mean * mean;
        (var > 0.0 && self.count > 1).then(|| (var / (n - 1.0)).sqrt() * self.ppl())
    }
}

/// u16 values per token row of a base file: the quantized log-probabilities, padded to an even
/// count, after two f32 (scale, minimum log-probability).
pub fn base_row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// The reference's `nearest_int`: round half to even through the f32 mantissa (|x| < 2^22).
fn nearest_int(x: f32) -> i32 {
    ((x + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Quantizes `logits`' log-probabilities into `row` (`base_row_len` values) as the reference
/// writes them, and returns the token's negative log-likelihood as it computes it there.
pub fn encode_base_row(logits: &[f32], token: usize, row: &mut [u16]) -> f64 {
    let mut max = logits[0];
    let mut min = logits[0];
    for &l in &logits[1..] {
        max = max.max(l);
        min = min.min(l);
    }
    let min = min.max(max - 16.0);
    let sum_exp: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    let log_sum_exp = sum_exp.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / 65535.0;
    let (head, values) = row.split_at_mut(4);
    for (pair, v) in head.chunks_exact_mut(2).zip([scale, min_log_prob]) {
        let bits = v.to_bits();
        pair[0] = bits as u16;
        pair[1] = (bits >> 16) as u16;
    }
    values.fill(0);
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (q, &l) in values.iter_mut().zip(logits) {
            *q = if l > min {
                nearest_int(inv * (l - min)) as u16
            } else {
                0
            };
        }
    }
    (max + log_sum_exp - logits[token]) as f64
}

fn header_f32(row: &[u16], i: usize) -> f32 {
    f32::from_bits(row[2 * i] as u32 | (row[2 * i + 1] as u32) << 16)
}

/// The sums llama-perplexity keeps while comparing with a base.
#[derive(Clone, Debug, Default)]
pub struct KlDivergence {
    pub sum_nll: f64,
    pub sum_nll2: f64,
    pub sum_nll_base: f64,
    pub sum_nll_base2: f64,
    pub sum_nll_nll_base: f64,
    pub sum_kld: f64,
    pub sum_kld2: f64,
    pub sum_p_diff: f64,
    pub sum_p_diff2: f64,
    pub sum_p_diff4: f64,
    pub max_p_diff: f32,
    pub n_same_top: usize,
    pub count: usize,
    /// Each scored token's KL divergence and Δp (for the percentiles).
    pub kld_values: Vec<f32>,
    pub p_diff_values: Vec<f32>,
}

impl KlDivergence {
    /// Compares one position's `logits` with the base's row for it; `token` is the next token.
    pub fn add(&mut self, logits: &[f32], base: &[u16], token: usize) {
        let mut max = logits[0];
        let mut imax = 0;
        for (i, &l) in logits.iter().enumerate().skip(1) {
            if l > max {
                max = l;
                imax = i;
            }
        }
        let sum_exp: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
        let log_sum_exp = sum_exp.ln() as f32;
        let (scale, min_log_prob) = (header_f32(base, 0), header_f32(base, 1));
        let base = &base[4..];
        let nll = max + log_sum_exp - logits[token];
        self.sum_nll += nll as f64;
        self.sum_nll2 += (nll * nll) as f64;
        let nll_base = -(scale * base[token] as f32 + min_log_prob);
        self.sum_nll_base += nll_base as f64;
        self.sum_nll_base2 += (nll_base * nll_base) as f64;
        self.sum_nll_nll_base += (nll * nll_base) as f64;
        let log_norm = max + log_sum_exp;
        let mut kld = 0.0f64;
        let mut imax_base = 0;
        let mut p_log_base_max = 0.0f32;
        for (i, (&q, &l)) in base.iter().zip(logits).enumerate() {
            let p_log_base = scale * q as f32 + min_log_prob;
            if i == 0 || p_log_base > p_log_base_max {
                p_log_base_max = p_log_base;
                imax_base = i;
            }
            if p_log_base > -16.0 {
                let p_base = p_log_base.exp();
                kld += (p_base * (p_log_base - l + log_norm)) as f64;
            }
        }
        self.sum_kld += kld;
        self.sum_kld2 += kld * kld;
        self.count += 1;
        if imax == imax_base {
            self.n_same_top += 1;
        }
        let p_diff = (-nll).exp() - (-nll_base).exp();
        self.sum_p_diff += p_diff as f64;
        let p_diff2 = (p_diff * p_diff) as f64;
        self.sum_p_diff2 += p_diff2;
        self.sum_p_diff4 += p_diff2 * p_diff2;
        self.max_p_diff = self.max_p_diff.max(p_diff.abs());
        self.kld_values.push(kld as f32);
        self.p_diff_values.push(p_diff);
    }

    /// The statistics the reference prints at the end.
    pub fn summary(&self) -> KlSummary {
        let n = self.count;
        let log_ppl = mean_and_uncertainty(self.sum_nll, self.sum_nll2, n);
        let log_ppl_base = mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = covariance(self.sum_nll, self.sum_nll_base, self.sum_nll_nll_base, n);
        let ppl = log_ppl.0.exp();
        let ppl_base = log_ppl_base.0.exp();
        let ratio = log_ppl.0 - log_ppl_base.0;
        let ratio_unc =
            (log_ppl.1 * log_ppl.1 + log_ppl_base.1 * log_ppl_base.1 - 2.0 * cov).sqrt();
        let ppl_unc = ppl * log_ppl.1;
        let ppl_base_unc = ppl_base * log_ppl_base.1;
        let ppl_cov = ppl * ppl_base * cov;
        let kld = mean_and_uncertainty(self.sum_kld, self.sum_kld2, n);
        let mut klds = self.kld_values.clone();
        klds.sort_by(f32::total_cmp);
        let mut diffs = self.p_diff_values.clone();
        diffs.sort_by(f32::total_cmp);
        let p_diff = mean_and_uncertainty(self.sum_p_diff, self.sum_p_diff2, n);
        let mse = mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, n);
        let rms = mse.0.sqrt();
        let same_top = self.n_same_top as f64 / n as f64;
        KlSummary {
            count: n,
            ppl: (ppl, ppl_unc),
            ppl_base: (ppl_base, ppl_base_unc),
            ppl_correlation: cov / (log_ppl.1 * log_ppl_base.1),
            ln_ppl_ratio: (ratio, ratio_unc),
            ppl_ratio: (ratio.exp(), ratio.exp() * ratio_unc),
            ppl_diff: (
                ppl - ppl_base,
                (ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov).sqrt(),
            ),
            kld,
            kld_percentiles: KLD_PERCENTILES.map(|f| (f, percentile(&klds, f))),
            kld_median: median(&klds),
            p_diff,
            p_diff_percentiles: P_DIFF_PERCENTILES.map(|f| (f, percentile(&diffs, f))),
            p_diff_median: median(&diffs),
            p_diff_rms: (rms, 0.5 / rms * mse.1),
            same_top: (
                same_top,
                (same_top * (1.0 - same_top) / (n as f64 - 1.0)).sqrt(),
            ),
        }
    }
}

/// The percentiles the reference prints (1 = maximum, 0 = minimum).
pub const KLD_PERCENTILES: [f32; 10] = [1.0, 0.999, 0.99, 0.95, 0.9, 0.1, 0.05, 0.01, 0.001, 0.0];
pub const P_DIFF_PERCENTILES: [f32; 12] = [
    1.0, 0.999, 0.99, 0.95, 0.9, 0.75, 0.25, 0.1, 0.05, 0.01, 0.001, 0.0,
];

/// Value ± uncertainty pairs, as printed.
#[derive(Clone, Debug)]
pub struct KlSummary {
    pub count: usize,
    pub ppl: (f64, f64),
    pub ppl_base: (f64, f64),
    pub ppl_correlation: f64,
    pub ln_ppl_ratio: (f64, f64),
    pub ppl_ratio: (f64, f64),
    pub ppl_diff: (f64, f64),
    pub kld: (f64, f64),
    pub kld_percentiles: [(f32, f32); 10],
    pub kld_median: f32,
    pub p_diff: (f64, f64),
    pub p_diff_percentiles: [(f32, f32); 12],
    pub p_diff_median: f32,
    pub p_diff_rms: (f64, f64),
    pub same_top: (f64, f64),
}

/// Mean and its standard error (0 for fewer than 11 values, as the reference).
pub fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let n = count as f64;
    let f = sum / n;
    let df = sum2 / n - f * f;
    let df = if df > 0.0 && count > 10 {
        (df / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (f, df)
}

fn covariance(sum_a: f64, sum_b: f64, sum_ab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let n = count as f64;
    (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1.0)
}

/// Linear interpolation between the sorted values, as the reference's `percentile`.
pub fn percentile(sorted: &[f32], fraction: f32) -> f32 {
    if sorted.is_empty() {
        return f32::NAN;
    }
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return sorted[sorted.len() - 1];
    }
    let p = fraction * (sorted.len() - 1) as f32;
    let ip = p as usize;
    let p = p - ip as f32;
    (1.0 - p) * sorted[ip] + p * sorted[(ip + 1).min(sorted.len() - 1)]
}

fn median(sorted: &[f32]) -> f32 {
    let n = sorted.len();
    match n {
        0 => f32::NAN,
        _ if n.is_multiple_of(2) => 0.5 * (sorted[n / 2] + sorted[n / 2 - 1]),
        _ => sorted[n / 2],
    }
}

const MAGIC: &[u8; 8] = b"_logits_";

/// The head of a base file: the chunking and the tokens it was computed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseHeader {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    /// `n_chunk × n_ctx` tokens (the chunks' own, before any BOS replacement).
    pub tokens: Vec<u32>,
}

impl BaseHeader {
    pub fn plan(&self) -> ChunkPlan {
        ChunkPlan {
            n_ctx: self.n_ctx,
            n_chunk: self.n_chunk,
        }
    }

    /// Bytes the whole file must have.
    pub fn file_len(&self) -> u128 {
        let rows = self.n_chunk as u128 * self.plan().scored_per_chunk() as u128;
        8 + 12 + 4 * self.tokens.len() as u128 + rows * base_row_len(self.n_vocab) as u128 * 2
    }

    pub fn write(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(MAGIC)?;
        for v in [self.n_ctx, self.n_vocab, self.n_chunk] {
            out.write_all(&(v as i32).to_le_bytes())?;
        }
        for &t in &self.tokens {
            out.write_all(&(t as i32).to_le_bytes())?;
        }
        Ok(())
    }

    /// Reads and checks the head of a base of `file_len` bytes: every count is checked against
    /// the file's length before anything is allocated by it.
    pub fn read(input: &mut impl Read, file_len: u64) -> Result<BaseHeader, PerplexityError> {
        let bad = |reason: String| PerplexityError::BadBase { reason };
        let mut magic = [0u8; 8];
        input
            .read_exact(&mut magic)
            .map_err(|_| bad("it is shorter than its 8-byte magic".into()))?;
        if &magic != MAGIC {
            return Err(bad("it does not start with \"_logits_\"".into()));
        }
        let mut counts = [0usize; 3];
        for (c, name) in counts.iter_mut().zip(["n_ctx", "n_vocab", "n_chunk"]) {
            let mut b = [0u8; 4];
            input
                .read_exact(&mut b)
                .map_err(|_| bad(format!("it ends before {name}")))?;
            let v = i32::from_le_bytes(b);
            if v <= 0 {
                return Err(bad(format!("{name} is {v}")));
            }
            *c = v as usize;
        }
        let [n_ctx, n_vocab, n_chunk] = counts;
        if n_ctx < 4 {
            return Err(bad(format!("n_ctx is {n_ctx}")));
        }
        let shape = BaseHeader {
            n_ctx,
            n_vocab,
            n_chunk,
            tokens: Vec::new(),
        };
        let n_tokens = n_ctx as u128 * n_chunk as u128;
        let want = shape.file_len() + 4 * n_tokens;
        if want != file_len as u128 {
            return Err(bad(format!(
                "n_ctx {n_ctx}, n_vocab {n_vocab} and n_chunk {n_chunk} make {want} bytes, the file has {file_len}"
            )));
        }
        let mut raw = vec![0u8; 4 * n_tokens as usize];
        input.read_exact(&mut raw)?;
        let tokens = raw
            .chunks_exact(4)
            .map(|b| {
                let t = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                u32::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < n_vocab)
                    .ok_or_else(|| bad(format!("token {t} is outside the vocabulary of {n_vocab}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BaseHeader { tokens, ..shape })
    }
}

/// Writes `rows` (u16 values) little-endian.
pub fn write_rows(out: &mut impl Write, rows: &[u16]) -> io::Result<()> {
    let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    out.write_all(&bytes)
}

/// Reads `rows.len()` u16 values.
pub fn read_rows(input: &mut impl Read, rows: &mut [u16]) -> io::Result<()> {
    let mut bytes = vec![0u8; rows.len() * 2];
    input.read_exact(&mut bytes)?;
    for (v, b) in rows.iter_mut().zip(bytes.chunks_exact(2)) {
        *v = u16::from_le_bytes([b[0], b[1]]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_softmax(logits: &[f32]) -> Vec<f64> {
        let max = logits.iter().copied().fold(f32::MIN, f32::max) as f64;
        let lse = logits
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
        logits.iter().map(|&l| l as f64 - max - lse).collect()
    }

    fn pseudo_logits(seed: u32, n: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 20_000) as f32 / 1000.0 - 10.0
            })
            .collect()
    }

    #[test]
    fn a_uniform_distribution_has_the_vocabulary_size_as_perplexity() {
        let mut nll = Nll::default();
        for t in 0..50 {
            nll.add(token_nll(&[0.25; 40], t % 40));
        }
        assert!((nll.ppl() - 40.0).abs() < 1e-9, "{}", nll.ppl());
        // No spread but the sums' rounding.
        assert!(
            nll.ppl_error().unwrap_or(0.0) < 1e-5,
            "{:?}",
            nll.ppl_error()
        );
    }

    #[test]
    fn token_nll_is_minus_the_log_softmax() {
        let logits = pseudo_logits(7, 301);
        let exact = log_softmax(&logits);
        for t in [0, 5, 300] {
            assert!((token_nll(&logits, t) + exact[t]).abs() < 1e-5);
        }
    }

    #[test]
    fn base_rows_decode_to_the_log_probabilities_within_their_step() {
        let logits = pseudo_logits(3, 1001);
        let mut row = vec![0u16; base_row_len(1001)];
        assert_eq!(row.len(), 1006);
        let nll = encode_base_row(&logits, 17, &mut row);
        let exact = log_softmax(&logits);
        assert!((nll + exact[17]).abs() < 1e-4);
        let (scale, min_lp) = (header_f32(&row, 0), header_f32(&row, 1));
        let max = exact.iter().copied().fold(f64::MIN, f64::max);
        for (i, &q) in row[4..4 + 1001].iter().enumerate() {
            let decoded = (scale * q as f32 + min_lp) as f64;
            if exact[i] > max - 16.0 {
                assert!(
                    (decoded - exact[i]).abs() <= scale as f64,
                    "{i}: {decoded} vs {}",
                    exact[i]
                );
            } else {
                assert_eq!(q, 0, "below the 16-nat window: clamped to the minimum");
            }
        }
        assert_eq!(row[1005], 0, "padding");
    }

    #[test]
    fn nearest_int_rounds_half_to_even() {
        for (x, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (65534.6, 65535),
            (-1.5, -2),
            (3.2, 3),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }

    #[test]
    fn the_same_logits_give_no_divergence_and_the_same_top_token() {
        let mut kld = KlDivergence::default();
        let mut other = KlDivergence::default();
        let mut row = vec![0u16; base_row_len(500)];
        for s in 0..40 {
            // Within the 16-nat window the base keeps (below it every value reads as its floor).
            let logits: Vec<f32> = pseudo_logits(s, 500).iter().map(|l| l * 0.7).collect();
            encode_base_row(&logits, (s * 7) as usize % 500, &mut row);
            kld.add(&logits, &row, (s * 7) as usize % 500);
            // A sharpened copy diverges.
            let sharper: Vec<f32> = logits.iter().map(|l| l * 1.5).collect();
            other.add(&sharper, &row, (s * 7) as usize % 500);
        }
        let same = kld.summary();
        assert!(same.kld.0.abs() < 1e-4, "{:?}", same.kld);
        assert_eq!(same.same_top.0, 1.0);
        assert!(same.ln_ppl_ratio.0.abs() < 1e-3);
        let diff = other.summary();
        assert!(diff.kld.0 > 0.01, "{:?}", diff.kld);
        assert!(diff.kld_percentiles[0].1 >= diff.kld_median);
    }

    #[test]
    fn percentiles_interpolate_as_the_reference() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 5.0);
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert!((percentile(&v, 0.9) - 4.6).abs() < 1e-6);
        assert_eq!(median(&[1.0, 2.0, 3.0, 10.0]), 2.5);
    }

    #[test]
    fn chunks_need_two_contexts_and_take_bos_first() {
        assert!(matches!(
            ChunkPlan::new(15, 8, None),
            Err(PerplexityError::TooFewTokens { needed: 16, .. })
        ));
        let plan = ChunkPlan::new(35, 8, None).unwrap();
        assert_eq!(
            (plan.n_chunk, plan.first(), plan.scored_per_chunk()),
            (4, 4, 3)
        );
        assert_eq!(ChunkPlan::new(35, 8, Some(2)).unwrap().n_chunk, 2);
        let tokens: Vec<u32> = (0..35).collect();
        assert_eq!(
            plan.chunk(&tokens, 1, Some(99)),
            [99, 9, 10, 11, 12, 13, 14, 15]
        );
        assert_eq!(plan.chunk(&tokens, 1, None)[0], 8);
    }

    #[test]
    fn a_base_round_trips_and_a_damaged_one_is_refused_naming_why() {
        let header = BaseHeader {
            n_ctx: 8,
            n_vocab: 5,
            n_chunk: 2,
            tokens: (0..16).map(|t| t % 5).collect(),
        };
        let mut file = Vec::new();
        header.write(&mut file).unwrap();
        let rows = vec![7u16; 2 * 3 * base_row_len(5)];
        write_rows(&mut file, &rows).unwrap();
        assert_eq!(file.len() as u128, header.file_len());
        let mut input = &file[..];
        let back = BaseHeader::read(&mut input, file.len() as u64).unwrap();
        assert_eq!(back, header);
        let mut got = vec![0u16; rows.len()];
        read_rows(&mut input, &mut got).unwrap();
        assert_eq!(got, rows);

        let read = |bytes: &[u8]| {
            BaseHeader::read(&mut &bytes[..], bytes.len() as u64)
                .unwrap_err()
                .to_string()
        };
        assert!(read(&file[..file.len() - 2]).contains("the file has"));
        assert!(read(b"_logitz_\0\0\0\0").contains("_logits_"));
        let mut huge = file.clone();
        huge[16..20].copy_from_slice(&i32::MAX.to_le_bytes()); // n_chunk
        assert!(read(&huge).contains("n_chunk 2147483647"));
        let mut bad_token = file.clone();
        bad_token[20..24].copy_from_slice(&9i32.to_le_bytes());
        assert!(read(&bad_token).contains("token 9"));
    }
}
