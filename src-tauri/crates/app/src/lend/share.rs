//! The share a host asks of this Mac, against this Mac's budget: the same
//! fit as a local model's, over the layer range and context the placement
//! names, refused in words with its numbers where it would swap.

use headroom_core::fit::{BudgetInputs, ModelFootprint};
use headroom_engine::peer::Placement;
use headroom_engine::{ComputeDtype, QuantKernel};

use crate::fit::{gb, verdict_line};

/// The share `p` asks of this Mac's copy at `p.model.path` against `budget`.
pub fn check_share(p: &Placement, budget: BudgetInputs) -> Result<(), String> {
    let dtype = if p.f32 { ComputeDtype::F32 } else { ComputeDtype::Native };
    let kernel = QuantKernel::from_name(&p.kernel).ok_or_else(|| format!("unknown kernel {:?}", p.kernel))?;
    let inspection = headroom_engine::inspect(&p.model.path, dtype, kernel)
        .map_err(|e| format!("this Mac cannot read its copy of {}: {e}", p.model.path.display()))?;
    check_share_of(&inspection.footprint, p, budget)
}

/// The share `p` asks of a model with footprint `fp` (read from this Mac's
/// copy, or from the hub's headers before a pull), against this Mac's
/// budget. The placement's fields were bounded already (`Placement::check`);
/// here they meet the model's layers and this Mac's budget.
pub fn check_share_of(fp: &ModelFootprint, p: &Placement, budget: BudgetInputs) -> Result<(), String> {
    headroom_core::split::check_splittable(fp).map_err(|e| e.to_string())?;
    if usize::try_from(fp.layers).ok() != Some(p.layers) || p.first_layer == 0 || p.first_layer >= p.layers {
        return Err(format!(
            "the placement's `layers`: {}..{} of {} do not match this copy's {} layers",
            p.first_layer,
            p.layers,
            p.model.path.display(),
            fp.layers
        ));
    }
    let context = u64::try_from(p.context).unwrap_or(u64::MAX);
    let first = u64::try_from(p.first_layer).unwrap_or(u64::MAX);
    let share = headroom_core::split::share(fp, first..fp.layers, context, p.kv, budget);
    if share.fit.verdict.refuses() {
        return Err(format!(
            "layers {first}..{} would not fit on {}: it {} (peak {} = weights {} + KV cache {} + overhead {} vs budget {})",
            fp.layers,
            headroom_memory::machine_name(),
            verdict_line(&share.fit),
            gb(share.fit.estimate.predicted_peak_bytes),
            gb(share.fit.estimate.weight_bytes),
            gb(share.fit.estimate.kv_peak_bytes()),
            gb(share.fit.estimate.overhead.total_bytes),
            gb(share.fit.budget.budget_bytes),
        ));
    }
    Ok(())
}
