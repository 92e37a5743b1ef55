//! An executable outside the engine crate loads the same libmlx and computes
//! with it: the rpath hand-off (engine build.rs -> DEP_HEADROOM_MLX_LIBDIR ->
//! this package's build.rs) works for every binary we build, not just the engine's.

use headroom_engine::testing::{Array, QuantizedMatrix};
use headroom_engine::EngineError;

#[test]
fn a_binary_outside_the_engine_loads_the_wheels_libmlx() {
    assert_eq!(headroom_engine::backend_info().mlx_version, "0.32.2");
}

#[test]
fn an_identity_survives_8_bit_quantization() -> Result<(), EngineError> {
    // 0 and 1 are exactly representable with 8-bit affine groups, so x·Iᵀ = x.
    let n = 64;
    let eye: Vec<f32> = (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 }).collect();
    let q = QuantizedMatrix::quantize(&mlx_array(&eye, &[n, n]), 64, 8)?;
    let x: Vec<f32> = (0..n).map(|i| i as f32 - 20.5).collect();
    let y = q.matmul_t(&mlx_array(&x, &[1, n]))?;
    assert_eq!(y.as_slice::<f32>(), x.as_slice());
    Ok(())
}

fn mlx_array(values: &[f32], shape: &[usize]) -> Array {
    let shape: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
    Array::from_slice(values, &shape)
}
