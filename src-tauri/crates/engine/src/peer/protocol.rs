//! What a host and the Mac lent to it say on their control connection (one
//! JSON message per sealed frame of [`super::secure::Conn`]), the host
//! asking and the lender answering: pairing's names, the budget, the
//! placement. Hidden states go over MLX's ring, through the relay.

use headroom_core::fit::BudgetInputs;
use headroom_core::kv::KvFormat;
use serde::{Deserialize, Serialize};

use super::copy::ModelCopy;
pub use super::secure::Conn;
use crate::error::{EngineError, Result};

/// The protocol's version: a host and a lender of different versions refuse
/// each other up front rather than misreading a field.
pub const VERSION: u32 = 3;

/// What a host asks a lender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Request {
    /// Sent on a pairing connection once its handshake proved the code:
    /// the host's name, for the lender to ask "Allow <machine> to use this
    /// Mac?".
    Pair { version: u32, machine: String },
    /// This Mac's budget for a model (what the fit here would use).
    Budget { version: u32 },
    /// Run a layer range of a model for the host.
    Place { version: u32, placement: Placement },
}

/// The longest machine name a pairing may carry.
pub const MAX_MACHINE: usize = 256;

/// A layer range of a model, as the host placed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The model: where the host's copy came from and what it is; the
    /// lender runs its own copy with the same identity.
    pub model: ModelCopy,
    /// The first layer the lender runs; it runs every layer from there to the end.
    pub first_layer: usize,
    /// The model's layers in all (checked against the lender's copy).
    pub layers: usize,
    /// Whether floats are computed in f32 (the host's `--dtype`).
    pub f32: bool,
    /// The quantized-matmul kernel (`QuantKernel::as_str`); both sides must
    /// multiply alike for the output to be the one-Mac output.
    pub kernel: String,
    /// How the KV cache stores keys and values.
    pub kv: KvFormat,
    /// The context the split was fitted for (the lender checks its share at it).
    pub context: usize,
}

/// The largest context a placement may name: the pass header carries
/// positions as `i32`.
pub const MAX_CONTEXT: usize = i32::MAX as usize;
/// The most layers a placement may name (the largest models have under 200).
pub const MAX_LAYERS: usize = 4096;
/// The longest path, repo, commit, identity or kernel name a placement may carry.
const MAX_FIELD: usize = 4096;

impl Placement {
    /// Every field checked and bounded before a lender reads or sizes
    /// anything from it (the KV format through the validator the host's
    /// settings go through); the error names the field.
    pub fn check(&self) -> Result<()> {
        let bad = |field: &'static str, reason: String| Err(EngineError::BadPlacement { field, reason });
        if !(1..=MAX_LAYERS).contains(&self.layers) {
            return bad("layers", format!("{} is not between 1 and {MAX_LAYERS}", self.layers));
        }
        if self.first_layer == 0 || self.first_layer >= self.layers {
            return bad("first_layer", format!("{} is not a split point of {} layers", self.first_layer, self.layers));
        }
        if !(1..=MAX_CONTEXT).contains(&self.context) {
            return bad("context", format!("{} tokens is not between 1 and {MAX_CONTEXT}", self.context));
        }
        if let KvFormat::Quantized(q) = self.kv {
            if let Err(e) = KvFormat::quantized(q.bits.into(), q.group_size.into(), q.start) {
                return bad("kv", e.to_string());
            }
        }
        if crate::quant::QuantKernel::from_name(&self.kernel).is_none() {
            return bad("kernel", format!("unknown kernel {:?}", self.kernel.chars().take(64).collect::<String>()));
        }
        let id = &self.model.identity;
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return bad("model.identity", "not a hex identity of at most 64 digits".into());
        }
        let long = [
            ("model.path", self.model.path.as_os_str().len()),
            ("model.repo", self.model.repo.as_ref().map_or(0, String::len)),
            ("model.commit", self.model.commit.as_ref().map_or(0, String::len)),
        ];
        if let Some((field, len)) = long.into_iter().find(|&(_, len)| len > MAX_FIELD) {
            return bad(field, format!("{len} bytes, over {MAX_FIELD}"));
        }
        Ok(())
    }
}

/// What a lender answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    /// Its budget now.
    Budget { version: u32, machine: String, budget: BudgetInputs },
    /// The range is loaded: from now on the connection is the ring's relay
    /// ([`super::relay`]), and the lender joins the ring.
    Placed,
    /// The lender has no copy of the model and is pulling it from the hub
    /// (after checking that its share fits): sent every few seconds until
    /// the copy is complete, so the host knows the lender is alive.
    Pulling { done_bytes: u64, total_bytes: u64 },
    /// Paired: each side pinned the other's key. `approved`: whether the
    /// lender's owner allowed this host already (else the lender asks, and
    /// refuses the host's requests until they do).
    Paired { machine: String, approved: bool },
    /// Not placed, and why (its own fit verdict with its numbers, a missing
    /// copy of the model, another version).
    Refused { message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn placement() -> Placement {
        Placement {
            model: ModelCopy {
                path: "/models/x.gguf".into(),
                repo: Some("org/x".into()),
                commit: None,
                identity: "ab".into(),
            },
            first_layer: 15,
            layers: 30,
            f32: false,
            kernel: "fused".into(),
            kv: KvFormat::Float,
            context: 4096,
        }
    }

    #[test]
    fn each_placement_field_out_of_bounds_is_refused_by_name() {
        placement().check().unwrap();
        let quant = |bits, group_size| KvFormat::Quantized(headroom_core::kv::KvQuant { bits, group_size, start: 0 });
        let cases: Vec<(&str, Placement)> = vec![
            ("kv", Placement { kv: quant(4, 0), ..placement() }),
            ("kv", Placement { kv: quant(99, 64), ..placement() }),
            ("context", Placement { context: 1 << 63, ..placement() }),
            ("context", Placement { context: 0, ..placement() }),
            ("layers", Placement { layers: 1 << 40, ..placement() }),
            ("first_layer", Placement { first_layer: 30, ..placement() }),
            ("kernel", Placement { kernel: "x".repeat(10_000), ..placement() }),
        ];
        for (field, p) in cases {
            let e = p.check().unwrap_err();
            assert!(matches!(&e, EngineError::BadPlacement { field: f, .. } if *f == field), "{field}: {e}");
            assert!(e.to_string().contains(&format!("`{field}`")), "{e}");
        }
    }
}
