//! Affine-quantized weight matrices in the mlx-community layout.
//!
//! A quantized linear layer in an mlx-community checkpoint is three tensors
//! under one prefix: `weight` (u32, `bits`-wide values packed along the input
//! dimension), `scales` and `biases` (one pair per `group_size` inputs). Each
//! weight is `scale * q + bias`. Keeping that layout as it is on disk means
//! the loader can hand tensors straight through, per-layer overrides of
//! `bits`/`group_size` need nothing special, and nothing is re-keyed (unlike
//! `mlx_rs::nn::QuantizedLinear`, which expects `<prefix>.inner.weight`).

use mlx_rs::{ops, Array};

use crate::error::{EngineError, MlxContext, Result};

/// Bit widths MLX's affine quantization supports.
pub const SUPPORTED_BITS: [i32; 6] = [2, 3, 4, 5, 6, 8];
/// Group sizes MLX's affine quantization supports.
pub const SUPPORTED_GROUP_SIZES: [i32; 3] = [32, 64, 128];

/// A `[out, in]` weight matrix stored affine-quantized.
#[derive(Debug)]
pub struct QuantizedMatrix {
    /// Packed values, `[out, in * bits / 32]`, u32.
    pub weight: Array,
    /// `[out, in / group_size]`, same float dtype as the activations.
    pub scales: Array,
    /// `[out, in / group_size]`.
    pub biases: Array,
    pub group_size: i32,
    pub bits: i32,
}

fn check_params(group_size: i32, bits: i32) -> Result<()> {
    if SUPPORTED_BITS.contains(&bits) && SUPPORTED_GROUP_SIZES.contains(&group_size) {
        Ok(())
    } else {
        Err(EngineError::UnsupportedQuantization { bits, group_size })
    }
}

impl QuantizedMatrix {
    /// Quantizes a dense `[out, in]` matrix (`in` must be a multiple of `group_size`).
    pub fn quantize(w: &Array, group_size: i32, bits: i32) -> Result<Self> {
        check_params(group_size, bits)?;
        match w.shape() {
            [_, cols] if cols % group_size == 0 => {}
            found => {
                return Err(EngineError::Shape {
                    what: "matrix to quantize",
                    expected: format!("[out, in] with in a multiple of {group_size}"),
                    found: found.to_vec(),
                })
            }
        }
        let (weight, scales, biases) = ops::quantize(w, group_size, bits).op("quantize")?;
        Ok(Self { weight, scales, biases, group_size, bits })
    }

    /// Number of input features (columns of the dense matrix).
    pub fn in_features(&self) -> i32 {
        self.weight.shape().last().copied().unwrap_or(0) * 32 / self.bits
    }

    /// `x · Wᵀ` for `x` of shape `[…, in]`, without materialising `W`.
    pub fn matmul_t(&self, x: &Array) -> Result<Array> {
        ops::quantized_matmul(
            x,
            &self.weight,
            &self.scales,
            &self.biases,
            true,
            self.group_size,
            self.bits,
        )
        .op("quantized_matmul")
    }

    /// The dense `[out, in]` matrix these tensors stand for.
    pub fn dequantize(&self) -> Result<Array> {
        ops::dequantize(&self.weight, &self.scales, &self.biases, self.group_size, self.bits)
            .op("dequantize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random values in [-1, 1) without MLX, so the
    /// reference below shares nothing with the code under test.
    fn values(n: usize, mut seed: u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Unpacks MLX's affine 4-bit layout by hand: eight values per u32, the
    /// first in the lowest nibble; `w = scale * q + bias` per group.
    fn dequantize_4bit_by_hand(q: &QuantizedMatrix, rows: usize, cols: usize) -> Vec<f32> {
        let packed = q.weight.as_slice::<u32>();
        let scales = q.scales.as_slice::<f32>();
        let biases = q.biases.as_slice::<f32>();
        let gs = q.group_size as usize;
        let groups = cols / gs;
        let mut out = vec![0.0; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                let word = packed[r * cols / 8 + c / 8];
                let nibble = (word >> (4 * (c % 8))) & 0xF;
                let g = r * groups + c / gs;
                out[r * cols + c] = scales[g] * nibble as f32 + biases[g];
            }
        }
        out
    }

    #[test]
    fn four_bit_matmul_matches_a_dequantized_reference() -> Result<()> {
        let (rows, cols, batch) = (96, 256, 3);
        let w_vals = values(rows * cols, 7);
        let x_vals = values(batch * cols, 11);
        let w = Array::from_slice(&w_vals, &[rows as i32, cols as i32]);
        let x = Array::from_slice(&x_vals, &[batch as i32, cols as i32]);

        let q = QuantizedMatrix::quantize(&w, 64, 4)?;
        assert_eq!(q.weight.shape(), &[rows as i32, (cols / 8) as i32]);
        assert_eq!(q.scales.shape(), &[rows as i32, (cols / 64) as i32]);
        assert_eq!(q.in_features(), cols as i32);
        let reference = dequantize_4bit_by_hand(&q, rows, cols);

        // 1. The packing is what the mlx-community files hold: MLX's own
        //    dequantize agrees with the hand-written unpacking.
        let deq = q.dequantize()?;
        for (a, b) in deq.as_slice::<f32>().iter().zip(&reference) {
            assert!((a - b).abs() < 1e-6, "dequantize {a} vs by-hand {b}");
        }

        // 2. The quantization is real and as coarse as 4 bits should be:
        //    MLX snaps each group's grid so that 0.0 is exactly representable,
        //    which can cost up to one step at the group's far edge, but the
        //    typical error is rounding (a quarter step on average).
        let scales = q.scales.as_slice::<f32>();
        let (mut moved, mut rel_err_sum) = (0, 0.0f64);
        for (i, (orig, approx)) in w_vals.iter().zip(&reference).enumerate() {
            let step = scales[(i / cols) * (cols / 64) + (i % cols) / 64].abs();
            let err = (orig - approx).abs();
            assert!(err <= step * 1.001, "weight {i}: {orig} -> {approx} (step {step})");
            rel_err_sum += f64::from(err / step);
            moved += usize::from(orig != approx);
        }
        assert!(moved > rows * cols / 2, "quantization changed only {moved} weights");
        let mean_rel_err = rel_err_sum / (rows * cols) as f64;
        assert!(mean_rel_err < 0.3, "mean error {mean_rel_err} steps");

        // 3. The fused kernel computes x · Wᵀ over the quantized weights.
        let y = q.matmul_t(&x)?;
        assert_eq!(y.shape(), &[batch as i32, rows as i32]);
        let y = y.as_slice::<f32>();
        for b in 0..batch {
            for r in 0..rows {
                let expect: f32 = (0..cols).map(|c| x_vals[b * cols + c] * reference[r * cols + c]).sum();
                let got = y[b * rows + r];
                assert!((got - expect).abs() < 1e-3 * (1.0 + expect.abs()), "y[{b},{r}] = {got}, expected {expect}");
            }
        }
        Ok(())
    }

    #[test]
    fn rejects_what_mlx_cannot_quantize() {
        let w = Array::from_slice(&values(10 * 48, 1), &[10, 48]);
        assert!(matches!(
            QuantizedMatrix::quantize(&w, 64, 4),
            Err(EngineError::Shape { found, .. }) if found == [10, 48]
        ));
        assert!(matches!(
            QuantizedMatrix::quantize(&w, 64, 7),
            Err(EngineError::UnsupportedQuantization { bits: 7, group_size: 64 })
        ));
    }
}
