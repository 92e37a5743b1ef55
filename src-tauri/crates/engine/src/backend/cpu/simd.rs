//! Softmax and SwiGLU's activation in f32 on the CPU backend, eight lanes
//! at a time.
//!
//! Why our own: the `mlx-cpu` wheel is built for baseline x86-64, without
//! AVX2 or FMA, so each exponential in MLX's softmax and SiLU is scalar,
//! with a libm call per fused multiply-add. `perf` put them (and the
//! causal mask's select) at about a quarter of a 17-row verification pass
//! on the default model (docs/speculative.md). The products around them
//! stay MLX's (OpenBLAS); the CPU table's attention and SwiGLU
//! ([`super::CpuKernels`]) call these only for a few f32 rows on the CPU
//! backend, where a prompt's long prefill chunks and every Metal run keep
//! MLX's own ops (and the memory the fit measured for them).
//!
//! `exp` here is `2^n · e^r` with `n = round(x / ln 2)` and `|r| ≤ ln 2 / 2`,
//! `e^r` by its Taylor series to `r^7` (the next term is under 1e-8 of the
//! result): within a few units in the last place of `f32::exp`. Without
//! AVX2 and FMA (an old x86; a Mac build does not contain this module) the same
//! functions run on `f32::exp`.
// AVX2 intrinsics, entered only after runtime detection.
#![allow(unsafe_code)]

/// `row[..visible]` = its softmax; `row[visible..]` = 0 (masked keys).
pub fn softmax_prefix(row: &mut [f32], visible: usize) {
    let (seen, masked) = row.split_at_mut(visible.min(row.len()));
    masked.fill(0.0);
    if seen.is_empty() {
        return;
    }
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { avx2::softmax(seen) };
        return;
    }
    let max = seen.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in seen.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    seen.iter_mut().for_each(|v| *v *= inv);
}

/// `gate[i] = silu(gate[i]) * up[i]`, `silu(g) = g / (1 + e^-g)` (0 below
/// -88, where it is under 1e-36).
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "SwiGLU's gate and up projections differ in length");
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { avx2::silu_mul(gate, up) };
        return;
    }
    for (g, u) in gate.iter_mut().zip(up) {
        *g = if *g < -88.0 { 0.0 } else { *g / (1.0 + (-*g).exp()) * u };
    }
}

/// Whether this CPU has AVX2 and FMA, which this module's and the
/// row-shared kernel's intrinsics need (std caches the answer).
pub(super) fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

pub(super) mod avx2 {
    use std::arch::x86_64::*;

    const LANES: usize = 8;

    /// `e^x` in each lane. Inputs are clamped to [-87, 88], where `2^n` is a
    /// normal float: below, the result is about 1.6e-38 instead of 0, which
    /// nothing here can tell apart from 0 (a softmax's sum is at least 1).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp(x: __m256) -> __m256 {
        let x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0)), _mm256_set1_ps(-87.0));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            x,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
        ));
        // ln 2 in two parts: the first has few enough bits that n × it is exact.
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.0 / 5040.0);
        for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let two_n = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
        _mm256_mul_ps(p, _mm256_castsi256_ps(two_n))
    }

    /// The sum of the eight lanes (the row-shared kernel's dot products too).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn lanes_sum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn lanes_max(v: __m256) -> f32 {
        let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
    }

    /// Applies `f` to `v` in chunks of eight; a last, shorter chunk goes
    /// through a zero-padded copy, so every value takes the same path.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn each_chunk(v: &mut [f32], mut f: impl FnMut(__m256, usize) -> __m256) {
        let mut chunks = v.chunks_exact_mut(LANES);
        for c in &mut chunks {
            let out = f(_mm256_loadu_ps(c.as_ptr()), LANES);
            _mm256_storeu_ps(c.as_mut_ptr(), out);
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let mut pad = [0.0f32; LANES];
            pad[..tail.len()].copy_from_slice(tail);
            let out = f(_mm256_loadu_ps(pad.as_ptr()), tail.len());
            _mm256_storeu_ps(pad.as_mut_ptr(), out);
            tail.copy_from_slice(&pad[..tail.len()]);
        }
    }

    /// Lanes from `n` on are zero: a padded chunk's filler.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn first(v: __m256, n: usize) -> __m256 {
        if n == LANES {
            return v;
        }
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx);
        _mm256_and_ps(v, _mm256_castsi256_ps(keep))
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax(v: &mut [f32]) {
        let mut max = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut chunks = v.chunks_exact(LANES);
        for c in &mut chunks {
            max = _mm256_max_ps(max, _mm256_loadu_ps(c.as_ptr()));
        }
        let max = chunks.remainder().iter().copied().fold(lanes_max(max), f32::max);
        let max = _mm256_set1_ps(max);
        let mut sum = _mm256_setzero_ps();
        each_chunk(v, |x, n| {
            let e = first(exp(_mm256_sub_ps(x, max)), n);
            sum = _mm256_add_ps(sum, e);
            e
        });
        let inv = _mm256_set1_ps(1.0 / lanes_sum(sum));
        each_chunk(v, |x, _| _mm256_mul_ps(x, inv));
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
        let mut at = 0;
        each_chunk(gate, |g, n| {
            let mut u = [0.0f32; LANES];
            u[..n].copy_from_slice(&up[at..at + n]);
            at += n;
            let sigmoid_inv = _mm256_add_ps(_mm256_set1_ps(1.0), exp(_mm256_sub_ps(_mm256_setzero_ps(), g)));
            let silu = _mm256_div_ps(g, sigmoid_inv);
            // Past the clamp in `exp`, g / e^88 would not shrink with g.
            let vanishing = _mm256_cmp_ps::<_CMP_LT_OQ>(g, _mm256_set1_ps(-88.0));
            _mm256_mul_ps(_mm256_andnot_ps(vanishing, silu), _mm256_loadu_ps(u.as_ptr()))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32, spread: f32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed).rotate_left(13);
                (h as f32 / u32::MAX as f32 - 0.5) * spread
            })
            .collect()
    }

    fn reference_softmax(v: &[f32]) -> Vec<f64> {
        let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let e: Vec<f64> = v.iter().map(|&x| (x as f64 - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter().map(|x| x / sum).collect()
    }

    #[test]
    fn softmax_matches_a_double_precision_reference_and_zeroes_masked_keys() {
        // Lengths around the eight lanes, and scores as wide as attention's get.
        for len in [1, 2, 7, 8, 9, 15, 16, 17, 300, 1031] {
            for spread in [0.1f32, 10.0, 200.0] {
                let scores = values(len, len as u32, spread);
                let visible = len - len / 3;
                let mut row = scores.clone();
                softmax_prefix(&mut row, visible);
                let want = reference_softmax(&scores[..visible]);
                for (i, (&got, &want)) in row.iter().zip(&want).enumerate() {
                    assert!(
                        (got as f64 - want).abs() <= 1e-6 * want + 1e-30,
                        "len {len} spread {spread} key {i}: {got} against {want}"
                    );
                }
                assert!(row[visible..].iter().all(|&p| p == 0.0), "masked keys get no weight");
                let mut none = scores.clone();
                softmax_prefix(&mut none, 0);
                assert!(none.iter().all(|&p| p == 0.0));
                let total: f32 = row.iter().sum();
                assert!((total - 1.0).abs() < 1e-5, "len {len}: weights sum to {total}");
            }
        }
    }

    #[test]
    fn a_row_gets_the_same_weights_whatever_follows_it() {
        // A verification pass's row sees the keys a one-row step at its
        // position sees, with masked keys after them: same weights, bit for bit.
        let scores = values(301, 7, 30.0);
        let mut step = scores[..290].to_vec();
        softmax_prefix(&mut step, 290);
        let mut pass_row = scores.clone();
        softmax_prefix(&mut pass_row, 290);
        assert_eq!(step, pass_row[..290]);
    }

    #[test]
    fn silu_mul_matches_its_definition_in_double_precision() {
        for len in [1, 5, 8, 13, 1536] {
            let gate = values(len, 3, 40.0);
            let up = values(len, 11, 4.0);
            let mut got = gate.clone();
            silu_mul(&mut got, &up);
            for i in 0..len {
                let g = gate[i] as f64;
                let want = g / (1.0 + (-g).exp()) * up[i] as f64;
                assert!(
                    (got[i] as f64 - want).abs() <= 1e-6 * want.abs() + 1e-30,
                    "len {len} at {i}: silu({g}) * {} = {} against {want}",
                    up[i],
                    got[i]
                );
            }
        }
    }

    #[test]
    fn extreme_gates_saturate_instead_of_overflowing() {
        let mut gate = vec![-1000.0, -90.0, 90.0, 1000.0, 0.0, f32::MAX, -f32::MAX, 1.0, 2.0];
        let up = vec![1.0; gate.len()];
        silu_mul(&mut gate, &up);
        assert!(gate.iter().all(|v| v.is_finite()), "{gate:?}");
        assert!([0, 1, 6].iter().all(|&i| gate[i].abs() < 1e-30), "{gate:?}");
        assert_eq!(gate[2], 90.0);
        assert_eq!(gate[4], 0.0);
    }
}
