//! `x · Wᵀ` over MLX's affine-quantized layout on an x86 CPU, unpacking
//! each weight once for all the rows of `x`.
//!
//! Why a kernel of our own: MLX's CPU `quantized_matmul` dequantizes the
//! whole matrix again for every row of `x`, one value at a time, so a pass
//! of 17 rows (a prompt-lookup check) costs 17 decode steps, and even one
//! row runs far below what the machine can do. Here each group is unpacked
//! with AVX2 once per output row (two output rows at a time, so that each
//! load of `x` serves both) and multiplied into every row of `x` while it
//! sits in L1; a single row of `x` (a decode step) takes each weight from
//! its word straight into the dot product. The output rows are split across
//! the cores by a team of hot helper threads ([`super::team`]). On the
//! 2-core development machine a SmolLM2-135M decode step went from 106 to
//! 26–27 ms, and a 17-row pass costs about 4 such steps
//! (`examples/pass_cost.rs`, docs/speculative.md). On a Mac the Metal
//! kernels run instead ([`crate::quant::QuantKernel::Fused`]); this module is
//! not even compiled there ([`crate::backend`]).
//!
//! The layout (MLX's, what mlx-community files and our GGUF reader hold):
//! `words` is `[out, in * bits / 32]` u32 with the first value in the
//! lowest bits; `scales` and `biases` are `[out, in / group]`, and a weight
//! is `scale * q + bias` for its group. 4- and 8-bit, groups of 32, 64 or
//! 128: what MLX's quantized models use. Other widths (2, 3, 5, 6 bits)
//! stay on MLX's kernel ([`supports`]).
//!
//! Every row of `x` is summed in the same order whatever the number of
//! rows, so a row's result does not depend on how many rows ran beside it.
// AVX2 intrinsics, entered only after runtime detection (an x86 without
// AVX2 and FMA leaves the matmul to MLX: `supports` is false there).
#![allow(unsafe_code)]

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::team;

/// The scales' or biases' storage: the model's float dtype.
#[derive(Debug, Clone, Copy)]
pub enum Params<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl Params<'_> {
    fn len(&self) -> usize {
        match self {
            Params::F32(v) => v.len(),
            Params::F16(v) => v.len(),
            Params::Bf16(v) => v.len(),
        }
    }

    /// `out` = these values `[start, start + out.len())`, widened.
    fn widen_into(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        match self {
            Params::F32(v) => out.copy_from_slice(&v[start..end]),
            Params::F16(v) => v[start..end].convert_to_f32_slice(out),
            Params::Bf16(v) => v[start..end].convert_to_f32_slice(out),
        }
    }
}

/// One quantized `[out, in]` matrix, borrowed from MLX's buffers.
#[derive(Debug, Clone, Copy)]
pub struct Packed<'a> {
    pub words: &'a [u32],
    pub scales: Params<'a>,
    pub biases: Params<'a>,
    pub out: usize,
    pub inputs: usize,
    pub group: usize,
    pub bits: usize,
}

/// Whether this machine and these parameters can take the kernel.
pub fn supports(bits: i32, group: i32) -> bool {
    unpacks(bits.into(), group.into()) && super::simd::has_avx2_fma()
}

/// The widths and group sizes the unpacking handles.
fn unpacks(bits: i64, group: i64) -> bool {
    matches!(bits, 4 | 8) && matches!(group, 32 | 64 | 128)
}

/// Why a matrix cannot be read as packed: its buffers disagree with its shape.
#[derive(Debug, PartialEq, Eq)]
pub struct Mismatch(pub &'static str);

impl<'a> Packed<'a> {
    /// Checks every length against `out × inputs` before any is indexed.
    pub fn new(
        words: &'a [u32],
        scales: Params<'a>,
        biases: Params<'a>,
        out: usize,
        inputs: usize,
        group: usize,
        bits: usize,
    ) -> Result<Self, Mismatch> {
        if !unpacks(bits as i64, group as i64) {
            return Err(Mismatch("bits or group size"));
        }
        if !inputs.is_multiple_of(group) {
            return Err(Mismatch("inputs not a multiple of the group size"));
        }
        if words.len() != out * inputs * bits / 32 {
            return Err(Mismatch("packed words"));
        }
        let groups = out * inputs / group;
        if scales.len() != groups || biases.len() != groups {
            return Err(Mismatch("scales or biases"));
        }
        Ok(Self { words, scales, biases, out, inputs, group, bits })
    }
}

/// Output rows per piece: enough pieces to balance two to sixteen
/// threads, few enough that claiming one stays a small part of it.
const MIN_PIECE_OUTPUTS: usize = 16;

/// `y = x · Wᵀ` for `x` of `rows × w.inputs` (row-major f32); `y` is
/// `rows × w.out`. Panics only on a caller's length error, which
/// [`Packed::new`] and the caller's shape checks rule out.
pub fn matmul_t(x: &[f32], rows: usize, w: &Packed<'_>) -> Vec<f32> {
    assert!(supports(w.bits as i32, w.group as i32), "row_shared::matmul_t without AVX2/FMA or for {} bits", w.bits);
    assert_eq!(x.len(), rows * w.inputs, "x is not rows × inputs");
    // Each piece writes whole output rows of W: [out, rows], transposed after.
    let mut by_output = vec![0.0f32; w.out * rows];
    let team = team::team();
    let per_piece = (w.out / (team.threads() * 4)).max(MIN_PIECE_OUTPUTS);
    // One lock a piece, taken once by whoever claims it: never contended.
    let pieces: Vec<Mutex<&mut [f32]>> = by_output.chunks_mut(per_piece * rows).map(Mutex::new).collect();
    let next = AtomicUsize::new(0);
    let groups = w.inputs / w.group;
    team.run(&|| {
        let mut scratch = Scratch::new(w, per_piece);
        loop {
            let piece = next.fetch_add(1, Ordering::Relaxed);
            let Some(y) = pieces.get(piece) else { break };
            let mut y = y.lock().unwrap_or_else(|e| e.into_inner());
            let (first, count) = (piece * per_piece, y.len() / rows);
            scratch.widen(w, first, count);
            let Scratch { scales, biases, row } = &mut scratch;
            let params = |i: usize| {
                let at = i * groups..(i + 1) * groups;
                (&scales[at.clone()], &biases[at])
            };
            let mut i = 0;
            while i < count {
                let y = &mut y[i * rows..];
                // SAFETY: `supports` checked AVX2 and FMA above; every index
                // the kernel forms is inside the lengths `Packed::new` and
                // the assert above checked.
                unsafe {
                    // Two output rows at a time where there are several rows
                    // of x: each x load then serves both.
                    if rows > 1 && i + 1 < count {
                        avx2::output_rows::<2>(x, rows, w, first + i, [params(i), params(i + 1)], row, y);
                        i += 2;
                        continue;
                    }
                    avx2::output_rows::<1>(x, rows, w, first + i, [params(i)], row, y);
                }
                i += 1;
            }
        }
    });
    drop(pieces);
    if rows == 1 {
        return by_output;
    }
    let mut y = vec![0.0f32; rows * w.out];
    for (n, col) in by_output.chunks(rows).enumerate() {
        for (m, v) in col.iter().enumerate() {
            y[m * w.out + n] = *v;
        }
    }
    y
}

/// A thread's buffers: a piece's scales and biases, widened to f32 in one
/// call each (per output row, the calls cost more than the widening), and
/// two output rows' dequantized weights.
struct Scratch {
    scales: Vec<f32>,
    biases: Vec<f32>,
    row: Vec<f32>,
}

impl Scratch {
    fn new(w: &Packed<'_>, outputs: usize) -> Self {
        let groups = w.inputs / w.group;
        Self { scales: vec![0.0; groups * outputs], biases: vec![0.0; groups * outputs], row: vec![0.0; 2 * w.inputs] }
    }

    /// Widens the scales and biases of output rows `first..first + count`.
    fn widen(&mut self, w: &Packed<'_>, first: usize, count: usize) {
        let groups = w.inputs / w.group;
        let n = groups * count;
        w.scales.widen_into(first * groups, &mut self.scales[..n]);
        w.biases.widen_into(first * groups, &mut self.biases[..n]);
    }
}

mod avx2 {
    use std::arch::x86_64::*;

    use super::Packed;
    use crate::backend::cpu::simd::avx2::lanes_sum as sum;

    /// Eight weights `scale * q + bias` from the packed words at `p`: one
    /// word holds eight 4-bit values, two words eight 8-bit ones.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn eight(p: *const u32, bits: usize, scale: __m256, bias: __m256) -> __m256 {
        let q = if bits == 4 {
            let w = _mm256_set1_epi32(*p as i32);
            let v = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
            _mm256_and_si256(v, _mm256_set1_epi32(0xF))
        } else {
            let (a, b) = (*p as i32, *p.add(1) as i32);
            let w = _mm256_setr_epi32(a, a, a, a, b, b, b, b);
            let v = _mm256_srlv_epi32(w, _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24));
            _mm256_and_si256(v, _mm256_set1_epi32(0xFF))
        };
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), scale, bias)
    }

    /// `y[p * rows + m] = x[m] · W[n + p]` for the `P` output rows from `n`
    /// and every row `m` of x, with each one's scales and biases widened,
    /// and `row` to hold their dequantized weights.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn output_rows<const P: usize>(
        x: &[f32],
        rows: usize,
        w: &Packed<'_>,
        n: usize,
        params: [(&[f32], &[f32]); P],
        row: &mut [f32],
        y: &mut [f32],
    ) {
        let k = w.inputs;
        // The loops walk pointers: no index arithmetic (and, in a dev
        // build, no overflow check) per eight weights.
        let mut words = w.words.as_ptr().add(n * k * w.bits / 32);
        let words_per_eight = w.bits / 4;
        if P == 1 && rows == 1 {
            // One row of x (a decode step): each weight goes from its word
            // straight into the dot product. The same multiply-adds in the
            // same order as `rows_dot` over a dequantized row, so the
            // result has the same bits.
            let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut xp = x.as_ptr();
            let (scales, biases) = params[0];
            for (&scale, &bias) in scales.iter().zip(biases) {
                let (scale, bias) = (_mm256_set1_ps(scale), _mm256_set1_ps(bias));
                // A group is a multiple of 16 (32, 64 or 128).
                for _ in 0..w.group / 16 {
                    let w0 = eight(words, w.bits, scale, bias);
                    let w1 = eight(words.add(words_per_eight), w.bits, scale, bias);
                    even = _mm256_fmadd_ps(_mm256_loadu_ps(xp), w0, even);
                    odd = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), w1, odd);
                    words = words.add(2 * words_per_eight);
                    xp = xp.add(16);
                }
            }
            y[0] = sum(_mm256_add_ps(even, odd));
            return;
        }
        // The rows of W once, dequantized, in L1/L2 for every row of x
        // (consecutive rows of W are consecutive in `words`).
        let mut out = row.as_mut_ptr();
        for (scales, biases) in params {
            for (&scale, &bias) in scales.iter().zip(biases) {
                let (scale, bias) = (_mm256_set1_ps(scale), _mm256_set1_ps(bias));
                for _ in 0..w.group / 8 {
                    _mm256_storeu_ps(out, eight(words, w.bits, scale, bias));
                    words = words.add(words_per_eight);
                    out = out.add(8);
                }
            }
        }
        let wrows = row.as_ptr();
        let mut m = 0;
        while m < rows {
            // Eight accumulators either way: four rows of x against one row
            // of W, or two against two.
            let left = rows - m;
            m += if P == 1 && left >= 4 {
                rows_dot::<P, 4>(x.as_ptr().add(m * k), k, wrows, y, rows, m);
                4
            } else if left >= 2 {
                rows_dot::<P, 2>(x.as_ptr().add(m * k), k, wrows, y, rows, m);
                2
            } else {
                rows_dot::<P, 1>(x.as_ptr().add(m * k), k, wrows, y, rows, m);
                1
            };
        }
    }

    /// `R` rows of x (stride `k`) against `P` dequantized rows of W (stride
    /// `k`), into `y[p * rows + m + r]`. Each pair of rows sums over two
    /// accumulators (even and odd blocks of eight) so that its FMAs do not
    /// wait on each other. Every pair sums in the same order whatever `P`
    /// and `R`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_dot<const P: usize, const R: usize>(
        x: *const f32,
        k: usize,
        w: *const f32,
        y: &mut [f32],
        rows: usize,
        m: usize,
    ) {
        let mut even = [[_mm256_setzero_ps(); R]; P];
        let mut odd = [[_mm256_setzero_ps(); R]; P];
        let mut xr = [x; R];
        for (r, p) in xr.iter_mut().enumerate() {
            *p = x.add(r * k);
        }
        let mut wp = [w; P];
        for (p, q) in wp.iter_mut().enumerate() {
            *q = w.add(p * k);
        }
        // `k` is a multiple of 32 (the smallest group): whole blocks of 16.
        for _ in 0..k / 16 {
            let mut w0 = [_mm256_setzero_ps(); P];
            let mut w1 = [_mm256_setzero_ps(); P];
            for p in 0..P {
                w0[p] = _mm256_loadu_ps(wp[p]);
                w1[p] = _mm256_loadu_ps(wp[p].add(8));
                wp[p] = wp[p].add(16);
            }
            for r in 0..R {
                let (x0, x1) = (_mm256_loadu_ps(xr[r]), _mm256_loadu_ps(xr[r].add(8)));
                for p in 0..P {
                    even[p][r] = _mm256_fmadd_ps(x0, w0[p], even[p][r]);
                    odd[p][r] = _mm256_fmadd_ps(x1, w1[p], odd[p][r]);
                }
                xr[r] = xr[r].add(16);
            }
        }
        for p in 0..P {
            for r in 0..R {
                y[p * rows + m + r] = sum(_mm256_add_ps(even[p][r], odd[p][r]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::values;

    /// The same product, one weight at a time, in f64.
    fn reference(x: &[f32], rows: usize, w: &Packed<'_>) -> Vec<f64> {
        let (k, groups) = (w.inputs, w.inputs / w.group);
        let mut s = vec![0.0; w.out * groups];
        let mut b = vec![0.0; w.out * groups];
        w.scales.widen_into(0, &mut s);
        w.biases.widen_into(0, &mut b);
        let per_word = 32 / w.bits;
        let mut y = vec![0.0f64; rows * w.out];
        for m in 0..rows {
            for n in 0..w.out {
                let mut acc = 0.0f64;
                for c in 0..k {
                    let word = w.words[(n * k + c) / per_word];
                    let q = (word >> (w.bits * (c % per_word))) & ((1 << w.bits) - 1);
                    let g = n * groups + c / w.group;
                    acc += f64::from(x[m * k + c]) * (f64::from(s[g]) * f64::from(q) + f64::from(b[g]));
                }
                y[m * w.out + n] = acc;
            }
        }
        y
    }

    #[test]
    fn matches_a_weight_by_weight_reference_for_every_width_group_and_row_count() {
        if !crate::backend::cpu::simd::has_avx2_fma() {
            eprintln!("no AVX2/FMA here: the kernel is not used, so not tested");
            return;
        }
        for (bits, group) in [(4, 32), (4, 64), (4, 128), (8, 32), (8, 64)] {
            // 71 outputs: pieces of 16, then 7, so the last row of W runs alone.
            let (out, k) = (71, 256);
            let words: Vec<u32> = values(out * k * bits / 32, bits as u64)
                .iter()
                .map(|v| (v.to_bits()).wrapping_mul(2654435761))
                .collect();
            let scales: Vec<f16> = values(out * k / group, 5).iter().map(|v| f16::from_f32(v * 0.02)).collect();
            let biases: Vec<bf16> = values(out * k / group, 9).iter().map(|v| bf16::from_f32(v * 0.1)).collect();
            let w = Packed::new(&words, Params::F16(&scales), Params::Bf16(&biases), out, k, group, bits).unwrap();
            let mut one_row = Vec::new();
            for rows in [1, 2, 3, 5, 17] {
                let x = values(rows * k, 100 + rows as u64);
                let got = matmul_t(&x, rows, &w);
                let want = reference(&x, rows, &w);
                for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*g) - r).abs() <= 1e-4 * (1.0 + r.abs()),
                        "{bits}-bit, group {group}, {rows} rows, [{i}]: {g} vs {r}"
                    );
                }
                // Row 0 of x is the same first row in every run below it:
                // identical bits, whatever ran beside it.
                let x0 = values(k, 100);
                let mut xs = x0.clone();
                xs.extend_from_slice(&x[k.min(x.len())..]);
                let first = matmul_t(&xs, rows, &w)[..out].to_vec();
                if one_row.is_empty() {
                    one_row = first;
                } else {
                    assert_eq!(first, one_row, "{bits}-bit, group {group}: row 0 changed with {rows} rows");
                }
            }
        }
    }

    #[test]
    fn a_matrix_whose_buffers_disagree_with_its_shape_is_refused() {
        let words = vec![0u32; 8 * 64 / 8];
        let p = vec![0.0f32; 8 * 64 / 32];
        let ok = Packed::new(&words, Params::F32(&p), Params::F32(&p), 8, 64, 32, 4);
        assert!(ok.is_ok());
        assert_eq!(
            Packed::new(&words, Params::F32(&p), Params::F32(&p), 9, 64, 32, 4).unwrap_err(),
            Mismatch("packed words")
        );
        assert_eq!(
            Packed::new(&words, Params::F32(&p[1..]), Params::F32(&p), 8, 64, 32, 4).unwrap_err(),
            Mismatch("scales or biases")
        );
        assert_eq!(
            Packed::new(&words, Params::F32(&p), Params::F32(&p), 8, 64, 32, 3).unwrap_err(),
            Mismatch("bits or group size")
        );
        assert!(!supports(3, 64) && !supports(4, 16));
    }
}
