//! What one forward pass costs by the number of rows it runs, after a
//! 300-token context: the figure that decides whether checking several
//! proposed tokens per pass (prompt lookup) can pay on this machine.
//!
//!   cargo run --release -p headroom-engine --features test-support --example pass_cost -- MODEL [dtype]
//!
//! MODEL is a model folder or a .gguf file; dtype `native` (default) or `f32`.
//! Prints the best of 5 per row count (each on a fresh copy of the context),
//! and of that pass the time the row-shared CPU kernel ran: the rest is
//! MLX's own ops (attention, norms, activations, the casts) and the
//! hand-overs between them.

use std::time::Instant;

use headroom_engine::testing::{kernel_clock, load_model, Array, Logits};
use headroom_engine::ComputeDtype;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().ok_or("usage: pass_cost MODEL [native|f32]")?);
    let dtype = match args.next().as_deref() {
        Some("f32") => ComputeDtype::F32,
        _ => ComputeDtype::Native,
    };
    let model = load_model(&dir, dtype)?;
    let context: Vec<u32> = (0..300u32).map(|i| 100 + i * 7 % 5000).collect();
    let mut one = None;
    // `PASS_ROWS=17` (a comma list) runs only those row counts, e.g. under `perf record`.
    let rows_list: Vec<usize> = match std::env::var("PASS_ROWS") {
        Ok(list) => list.split(',').map(|r| r.trim().parse()).collect::<Result<_, _>>()?,
        Err(_) => vec![1, 2, 3, 4, 5, 6, 8, 12, 16, 17, 24, 32, 48, 64],
    };
    // `PASS_REPEATS=n`: n passes over one context, each trimmed off again
    // (so a profile holds passes, not the context's prefill).
    let repeats: Option<usize> = std::env::var("PASS_REPEATS").ok().and_then(|r| r.parse().ok());
    for rows in rows_list {
        let (mut best, mut kernel) = (f64::MAX, 0.0);
        let mut cache = model.new_cache();
        for i in 0..repeats.unwrap_or(5) {
            if repeats.is_none() || i == 0 {
                cache = model.new_cache();
                let logits = model.forward(&Array::from_slice(&context, &[1, context.len() as i32]), &mut cache)?;
                mlx_rs::transforms::eval([&logits])?;
            } else {
                cache.trim(rows);
            }
            let ids = Array::from_slice(&context[..rows], &[1, rows as i32]);
            kernel_clock::take();
            let started = Instant::now();
            let logits = model.forward_with(&ids, &mut cache, Logits::All)?;
            mlx_rs::transforms::eval([&logits])?;
            let (took, in_kernel) = (started.elapsed().as_secs_f64(), kernel_clock::take().as_secs_f64());
            if took < best {
                (best, kernel) = (took, in_kernel);
            }
        }
        let base = *one.get_or_insert(best);
        println!(
            "rows {rows:2}: {:7.1} ms  ({:.2}× one row)  kernel {:6.1} ms, MLX and the rest {:6.1} ms",
            best * 1e3,
            best / base,
            kernel * 1e3,
            (best - kernel) * 1e3
        );
    }
    Ok(())
}
