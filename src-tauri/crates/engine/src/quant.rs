//! Affine-quantized weight matrices in the mlx-community layout.
//!
//! A quantized linear layer in an mlx-community checkpoint is three tensors
//! under one prefix: `weight` (u32, `bits`-wide values packed along the input
//! dimension), `scales` and `biases` (one pair per `group_size` inputs). Each
//! weight is `scale * q + bias`. Keeping that layout as it is on disk means
//! the loader can hand tensors straight through, per-layer overrides of
//! `bits`/`group_size` need nothing special, and nothing is re-keyed (unlike
//! `mlx_rs::nn::QuantizedLinear`, which expects `<prefix>.inner.weight`).

use mlx_rs::{ops, Array, Dtype};

use headroom_core::settings::KernelChoice;

use crate::backend::{kernels, DeviceKind, QuantView};
use crate::dtype::to_f32;
#[cfg(any(test, feature = "test-support"))]
use crate::error::EngineError;
use crate::error::{MlxContext, Result};

#[cfg(any(test, feature = "test-support"))]
use headroom_core::format::quant::{SUPPORTED_BITS, SUPPORTED_GROUP_SIZES};

/// How `x · Wᵀ` over a quantized `W` is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuantKernel {
    /// MLX's fused `quantized_matmul` in the activations' dtype for every
    /// shape: what mlx-lm does, and the fast kernel on Metal.
    #[default]
    Fused,
    /// For MLX's CPU backend, where two things make the fused kernel slow:
    /// x86 has no bf16 arithmetic, so with bf16 activations it runs about
    /// ten times slower than with f32 ones (and rounds more); and it redoes
    /// the dequantization for every row of `x`, so a prompt chunk costs as
    /// much per token as decode. So this kernel multiplies in f32 whatever
    /// the activations' dtype and rounds the result once:
    /// - below `row_shared_below_rows` rows (decode, a prompt-lookup check,
    ///   a short prompt), where the CPU backend's row-shared kernel takes
    ///   the matrix (4/8-bit, AVX2; [`crate::backend::Kernels`]), by that
    ///   kernel: each weight unpacked once for all rows;
    /// - otherwise by MLX's fused kernel below `dequantize_from_rows` rows,
    /// - and from there on (a prompt chunk) through `W` dequantized once
    ///   and one BLAS matmul.
    CpuF32 { dequantize_from_rows: i32, row_shared_below_rows: i32 },
}

impl QuantKernel {
    /// Rows from which dequantize + BLAS beats the fused kernel on MLX's CPU
    /// backend: measured on a 2-core x86 machine (768 x 2048, 4-bit, f32),
    /// fused costs 2 ms per row while dequantizing costs about 6.5 ms once,
    /// so the two meet at about 4 rows; 8 leaves a margin for other shapes.
    pub const CPU_DEQUANTIZE_FROM_ROWS: i32 = 8;

    /// Rows below which the row-shared kernel beats dequantize + BLAS:
    /// SmolLM2-135M on the 2-core x86 machine, one whole pass
    /// (`examples/pass_cost.rs`), measured when the kernel split its rows
    /// with rayon: 32 rows 276 ms, 48 rows 360 ms, 64 rows 546 ms, against
    /// about 400 ms for any count through BLAS. With its hot helpers 32
    /// rows take 174–185 ms and 48 through BLAS 471–561 ms, so the
    /// threshold is likely low now; moving it changes the fit's activation
    /// term (docs/still-open.md).
    pub const CPU_ROW_SHARED_BELOW_ROWS: i32 = 48;

    /// The CPU backend's kernel with the measured thresholds.
    pub const CPU: Self = Self::CpuF32 {
        dequantize_from_rows: Self::CPU_DEQUANTIZE_FROM_ROWS,
        row_shared_below_rows: Self::CPU_ROW_SHARED_BELOW_ROWS,
    };

    /// The kernel that suits the device MLX computes on.
    pub fn for_device(device: DeviceKind) -> Self {
        match device {
            DeviceKind::Cpu => Self::CPU,
            DeviceKind::Gpu => Self::Fused,
        }
    }

    /// The kernel a setting (or `--kernel`) asks for; `Auto` suits the device.
    pub fn choose(choice: KernelChoice) -> Self {
        match choice {
            KernelChoice::Auto => Self::for_device(crate::backend::backend_info().device),
            KernelChoice::Fused => Self::Fused,
            KernelChoice::Cpu => Self::CPU,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fused => "fused",
            Self::CpuF32 { .. } => "cpu-f32",
        }
    }

    /// How the CPU kernel runs a matrix of `bits`/`group` on this machine:
    /// below how many rows the row-shared kernel takes it (`None`: it does
    /// not, for these parameters or on this CPU), and from how many rows
    /// `W` is dequantized for BLAS. `None` for the fused kernel. What
    /// `matmul_t` does and what a benchmark's label says, from one place.
    pub fn cpu_paths(self, bits: i32, group: i32) -> Option<CpuPaths> {
        match self {
            Self::Fused => None,
            Self::CpuF32 { dequantize_from_rows, row_shared_below_rows } => {
                let shared =
                    (row_shared_below_rows > 0 && kernels().row_shared(bits, group)).then_some(row_shared_below_rows);
                Some(CpuPaths {
                    row_shared_below: shared,
                    dequantize_from: shared.map_or(dequantize_from_rows, |r| r.max(dequantize_from_rows)),
                })
            }
        }
    }

    /// The kernel [`Self::as_str`] names (a placement carries it to a peer).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "fused" => Some(Self::Fused),
            "cpu-f32" => Some(Self::CPU),
            _ => None,
        }
    }

    /// For labels: "fused, in the activations' dtype", or (on an AVX2 CPU)
    /// "in f32: 4/8-bit unpacked once for all rows below 48 rows,
    /// dequantized + BLAS from 48; other widths fused below 8 rows,
    /// dequantized + BLAS from 8".
    pub fn describe(self) -> String {
        // The CPU kernel's paths for the common widths and for the others.
        let (Some(common), Some(other)) = (self.cpu_paths(4, 64), self.cpu_paths(3, 64)) else {
            return "fused, in the activations' dtype".to_owned();
        };
        let fused = |p: CpuPaths| {
            let rows = p.dequantize_from;
            format!("fused below {rows} rows, dequantized + BLAS from {rows}")
        };
        match common.row_shared_below {
            Some(below) => format!(
                "in f32: 4/8-bit unpacked once for all rows below {below} rows, dequantized + BLAS from {}; \
                 other widths {}",
                common.dequantize_from,
                fused(other)
            ),
            None => format!("in f32: {}", fused(common)),
        }
    }
}

/// Where [`QuantKernel::CpuF32`] changes paths for one kind of matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuPaths {
    /// Below this many rows: each weight unpacked once for all rows.
    pub row_shared_below: Option<i32>,
    /// From this many rows: `W` dequantized once, then BLAS. Between the
    /// two (only where the row-shared kernel does not apply): MLX's fused
    /// kernel in f32.
    pub dequantize_from: i32,
}

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
    pub kernel: QuantKernel,
}

/// How many rows `x` holds: the product of its leading axes.
fn rows_of(x: &Array) -> i32 {
    x.shape().split_last().map_or(1, |(_, lead)| lead.iter().product())
}

#[cfg(any(test, feature = "test-support"))]
fn check_params(group_size: i32, bits: i32) -> Result<()> {
    if SUPPORTED_BITS.contains(&bits) && SUPPORTED_GROUP_SIZES.contains(&group_size) {
        Ok(())
    } else {
        Err(EngineError::UnsupportedQuantization { bits, group_size })
    }
}

impl QuantizedMatrix {
    /// Quantizes a dense `[out, in]` matrix (`in` must be a multiple of `group_size`).
    #[cfg(any(test, feature = "test-support"))]
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
        Ok(Self { weight, scales, biases, group_size, bits, kernel: QuantKernel::Fused })
    }

    /// Number of input features (columns of the dense matrix).
    #[cfg(test)]
    pub fn in_features(&self) -> i32 {
        self.weight.shape().last().copied().unwrap_or(0) * 32 / self.bits
    }

    /// `x · Wᵀ` for `x` of shape `[…, in]`, by this matrix's kernel.
    pub fn matmul_t(&self, x: &Array) -> Result<Array> {
        match self.kernel.cpu_paths(self.bits, self.group_size) {
            None => self.fused_matmul_t(x),
            Some(CpuPaths { row_shared_below, dequantize_from }) => {
                let rows = rows_of(x);
                if row_shared_below.is_some_and(|below| rows < below) {
                    match kernels().quantized_rows(self.view(), x)? {
                        Some((y, shape)) => {
                            let y = Array::from_slice(&y, &shape);
                            if x.dtype() == Dtype::Float32 {
                                Ok(y)
                            } else {
                                y.as_dtype(x.dtype()).op("cast back")
                            }
                        }
                        None => self.fused_matmul_t(x),
                    }
                } else if rows >= dequantize_from {
                    self.dense_matmul_t(x)
                } else if x.dtype() == Dtype::Float32 {
                    self.fused_matmul_t(x)
                } else {
                    // Widening the scales and biases each call reads an eighth
                    // of a 4-bit matrix's bytes (two bf16 per 64 weights): far
                    // less than the bf16 kernel's extra time, and nothing is
                    // kept after the call.
                    let y = ops::quantized_matmul(
                        &to_f32(x)?,
                        &self.weight,
                        &to_f32(&self.scales)?,
                        &to_f32(&self.biases)?,
                        true,
                        self.group_size,
                        self.bits,
                    )
                    .op("quantized_matmul")?;
                    y.as_dtype(x.dtype()).op("cast back")
                }
            }
        }
    }

    /// This matrix as the backend's kernels read it.
    pub(crate) fn view(&self) -> QuantView<'_> {
        QuantView {
            weight: &self.weight,
            scales: &self.scales,
            biases: &self.biases,
            group_size: self.group_size,
            bits: self.bits,
        }
    }

    /// Whether this matrix's kernel takes `x` on the row-shared path (few
    /// rows, on the CPU kernel, where the backend has it).
    pub(crate) fn takes_row_shared(&self, x: &Array) -> bool {
        let paths = self.kernel.cpu_paths(self.bits, self.group_size);
        paths.and_then(|p| p.row_shared_below).is_some_and(|below| rows_of(x) < below)
    }

    /// `x · Wᵀ` with MLX's fused kernel, in `x`'s dtype, without materialising `W`.
    pub fn fused_matmul_t(&self, x: &Array) -> Result<Array> {
        ops::quantized_matmul(x, &self.weight, &self.scales, &self.biases, true, self.group_size, self.bits)
            .op("quantized_matmul")
    }

    /// `x · Wᵀ` through the dense `W`, dequantized in f32 (scales and biases
    /// widened first, so a bf16 model loses nothing to rounding `W`) and
    /// dropped after the matmul. The result has `x`'s dtype and is evaluated
    /// here, so that one dequantized matrix is alive at a time: left lazy,
    /// MLX dequantized several ahead of their matmuls (a ~100M model at 261
    /// prompt tokens peaked 37 MB, four matrices, above the fused kernel;
    /// evaluated here, 7.5 MB). One sync per matmul of a whole prompt chunk
    /// costs nothing next to the chunk.
    pub fn dense_matmul_t(&self, x: &Array) -> Result<Array> {
        let w =
            ops::dequantize(&self.weight, &to_f32(&self.scales)?, &to_f32(&self.biases)?, self.group_size, self.bits)
                .op("dequantize")?;
        let y = ops::matmul(&to_f32(x)?, w.t()).op("dequantized matmul")?;
        let y = if x.dtype() == Dtype::Float32 { y } else { y.as_dtype(x.dtype()).op("cast back")? };
        y.eval().op("dequantized matmul")?;
        Ok(y)
    }

    /// The dense `[out, in]` matrix these tensors stand for.
    #[cfg(test)]
    pub fn dequantize(&self) -> Result<Array> {
        ops::dequantize(&self.weight, &self.scales, &self.biases, self.group_size, self.bits).op("dequantize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::values;

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
    fn the_cpu_kernel_computes_in_f32_and_rounds_once_on_every_side_of_its_row_thresholds() -> Result<()> {
        let (rows, cols) = (64, 256);
        let w = Array::from_slice(&values(rows * cols, 3), &[rows as i32, cols as i32]);
        for dtype in [Dtype::Float32, Dtype::Bfloat16] {
            let mut q = QuantizedMatrix::quantize(&w.as_dtype(dtype).op("cast")?, 64, 4)?;
            // Three paths: row-shared below 4 rows, fused below 8, dense from 8.
            q.kernel = QuantKernel::CpuF32 { dequantize_from_rows: 8, row_shared_below_rows: 4 };
            let row_shared = kernels().row_shared(4, 64);
            // x · Wᵀ over the same quantized W, exactly (in f32 on the host).
            let w32 = ops::dequantize(&q.weight, &to_f32(&q.scales)?, &to_f32(&q.biases)?, 64, 4).op("dequantize")?;
            let w32 = w32.as_slice::<f32>();
            let mut fused_worst = 0.0f32;
            for batch in [1usize, 3, 5, 7, 8, 40] {
                let x = Array::from_slice(&values(batch * cols, batch as u64), &[1, batch as i32, cols as i32])
                    .as_dtype(dtype)
                    .op("cast")?;
                let got = q.matmul_t(&x)?;
                assert_eq!(got.dtype(), dtype);
                assert_eq!(got.shape(), &[1, batch as i32, rows as i32]);
                let fused = q.fused_matmul_t(&x)?;
                let (got, fused) = (to_f32(&got)?, to_f32(&fused)?);
                let (got, fused) = (got.as_slice::<f32>(), fused.as_slice::<f32>());
                if dtype == Dtype::Float32 && batch < 8 && (batch >= 4 || !row_shared) {
                    // In f32 between the thresholds it is the fused kernel itself.
                    assert_eq!(got, fused, "batch {batch}");
                    continue;
                }
                let x32 = to_f32(&x)?;
                let x32 = x32.as_slice::<f32>();
                // f32: summation order only; bf16: one rounding to 8 bits.
                let tol = if dtype == Dtype::Float32 { 1e-5 } else { 1.0 / 256.0 };
                for b in 0..batch {
                    for r in 0..rows {
                        let expect: f32 = (0..cols).map(|c| x32[b * cols + c] * w32[r * cols + c]).sum();
                        let a = got[b * rows + r];
                        assert!(
                            (a - expect).abs() <= tol * (1.0 + expect.abs()),
                            "{dtype:?} [{b},{r}]: {a} vs {expect}"
                        );
                        fused_worst = fused_worst.max((fused[b * rows + r] - expect).abs() / (1.0 + expect.abs()));
                    }
                }
            }
            if dtype == Dtype::Bfloat16 {
                // Why not the bf16 fused kernel: it rounds well beyond one bf16 step.
                assert!(fused_worst > 1.0 / 256.0, "the fused bf16 kernel erred at most {fused_worst}");
            }
        }
        assert_eq!(QuantKernel::for_device(DeviceKind::Gpu), QuantKernel::Fused);
        assert_eq!(QuantKernel::for_device(DeviceKind::Cpu), QuantKernel::CPU);
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
