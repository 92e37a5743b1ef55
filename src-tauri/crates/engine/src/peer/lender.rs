//! The lender's side of a session: loads the layer range the host placed
//! here, joins the ring, and runs those layers for every pass until the
//! host ends the session (or the ring fails). Runs in a process of its own
//! (`headroom lend` starts one per session), so a dead or stuck ring never
//! takes the lending app down.

use std::time::{Duration, Instant};

use mlx_rs::{Array, Dtype};

use super::host::free_address;
use super::protocol::{Conn, Placement, Reply};
use super::ring::Ring;
use super::{Op, HEADER_LEN, STEPPED_ASIDE};
use crate::error::{EngineError, MlxContext, Result};
use crate::layers::last_position;
use crate::loader::{materialize, stage};
use crate::quant::QuantKernel;
use crate::sizes::PREFILL_CHUNK;
use crate::weights::ComputeDtype;

/// A lender waits this long for the host between passes before it gives
/// the session up (the host keeps it for as long as its model is loaded).
const IDLE_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a session that steps aside leaves its relay to forward its last pass.
const RELAY_FLUSH: Duration = Duration::from_millis(500);

/// What one session did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    pub passes: usize,
    pub rows: usize,
    pub compute: Duration,
    /// Whether it ended by stepping aside (memory pressure here).
    pub stepped_aside: bool,
}

/// Serves the session `placement` describes over `control` (the host's
/// connection, its placement already read): loads, answers `Placed`, joins
/// the ring and runs passes until the host ends it. A placement it cannot
/// load is answered `Refused` with the reason. `tight` is asked before each
/// pass: when it says memory is tight here, the lender steps aside as a
/// local model does (the host's answer ends saying so) and the session ends.
pub fn serve(mut control: Conn, placement: &Placement, tight: &mut dyn FnMut() -> bool) -> Result<Served> {
    placement.check()?;
    let loaded = load(placement);
    let (model, first) = match loaded {
        Ok(v) => v,
        Err(e) => {
            let _ = control.send(&Reply::Refused { message: e.to_string() });
            return Err(e);
        }
    };
    // This side's ring listens on loopback only; the relay carries it.
    let ring_addr = free_address(std::net::IpAddr::from([127, 0, 0, 1]))?;
    control.send(&Reply::Placed)?;
    let local = ring_addr.parse().map_err(|e| EngineError::Peer { reason: format!("{ring_addr}: {e}") })?;
    let relay = super::relay::Relay::start(control, local, 1)?;
    let host_ring = relay.port.to_string();
    let ring = Ring::join_within(&host_ring, &ring_addr, 1, IDLE_DEADLINE, super::ring::join_deadline())?;
    let stages = model
        .stages()
        .ok_or(EngineError::PeerUnsupported { model_type: model.config().model_type_name().to_owned() })?;
    let dtype = model.activation_dtype();
    let hidden = model.config().text.hidden_size;
    let mut cache = model.new_cache_as(placement.kv)?;
    let mut served = Served::default();
    tracing::info!("serving layers {first}..{} of {}", placement.layers, placement.model.path.display());
    loop {
        let header = ring.recv(&[HEADER_LEN], Dtype::Int32)?;
        let Some(Pass { batch: b, rows: l, offset, all }) = pass(header.as_slice::<i32>(), placement.context)? else {
            return Ok(served);
        };
        // Roll back to the host's length: a new turn (0), or past proposals it rejected.
        let have = cache.offset();
        if offset == 0 {
            cache.clear();
        } else if have > offset {
            cache.trim(have - offset);
        }
        if cache.offset() != offset {
            return Err(EngineError::Peer {
                reason: format!("the host's cache holds {offset} positions, this side's {}", cache.offset()),
            });
        }
        let h = ring.recv(&[b, l, hidden], dtype)?;
        if tight() {
            // The pass's shapes, so the host's receives complete, then the marker.
            let shape = [b, if all { l } else { 1 }, hidden];
            ring.send(&Array::zeros::<f32>(&shape).op("zeros")?.as_dtype(dtype).op("zeros")?)?;
            ring.send(&Array::from_slice(&[STEPPED_ASIDE], &[1]))?;
            served.stepped_aside = true;
            // MLX has handed the marker to its loopback socket; the relay
            // still has to read and forward it before this process ends
            // (its end closes the link, and the host would hear a lost
            // peer instead of why).
            std::thread::sleep(RELAY_FLUSH);
            drop(relay);
            return Ok(served);
        }
        let started = Instant::now();
        let out = stages.blocks(h, &mut cache)?;
        cache.maybe_quantize()?;
        let out = if all { out } else { last_position(&out)? };
        out.eval().op("the lent layers")?;
        let compute = started.elapsed();
        ring.send(&out)?;
        let micros = i32::try_from(compute.as_micros()).unwrap_or(i32::MAX);
        ring.send(&Array::from_slice(&[micros], &[1]))?;
        served.passes += 1;
        served.rows += usize::try_from(l).unwrap_or(0);
        served.compute += compute;
    }
}

/// One pass as its header describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pass {
    batch: i32,
    rows: i32,
    /// The host's cache length before the pass.
    offset: usize,
    /// Whether every row's output goes back (else the last one's).
    all: bool,
}

/// The pass a header asks for (`None`: the session is over), bounded by the
/// placement before anything is allocated for it: one batch, at most a
/// prefill chunk of rows, and no position past the placement's context
/// (the share this Mac checked against its budget).
fn pass(header: &[i32], context: usize) -> Result<Option<Pass>> {
    let &[op, batch, rows, offset, all] = header else {
        return Err(EngineError::Peer { reason: format!("a pass header of {} fields", header.len()) });
    };
    if op == Op::End as i32 {
        return Ok(None);
    }
    let bad = |field: &'static str, reason: String| Err(EngineError::BadPlacement { field, reason });
    if op != Op::Forward as i32 {
        return bad("pass.op", format!("{op} is not an operation this version knows"));
    }
    if batch != 1 {
        return bad("pass.batch", format!("{batch}: a split runs one sequence"));
    }
    let chunk = i32::try_from(PREFILL_CHUNK).unwrap_or(i32::MAX);
    if !(1..=chunk).contains(&rows) {
        return bad("pass.rows", format!("{rows} is not between 1 and the prefill chunk ({chunk})"));
    }
    let Ok(offset) = usize::try_from(offset) else {
        return bad("pass.offset", format!("{offset} is negative"));
    };
    let end = offset.saturating_add(usize::try_from(rows).unwrap_or(usize::MAX));
    if end > context {
        return bad("pass.offset", format!("positions {offset}..{end} run past the placement's context of {context}"));
    }
    Ok(Some(Pass { batch, rows, offset, all: all != 0 }))
}

/// The placed range of the model, staged, cut to the range and read, from
/// a copy whose identity is the host's (other weights would answer wrongly).
fn load(p: &Placement) -> Result<(crate::models::Model, usize)> {
    let path = &p.model.path;
    if super::copy::identity(path)? != p.model.identity {
        return Err(EngineError::Peer {
            reason: format!(
                "this Mac's copy at {} holds other weights than the host's (another revision, quantization or fine-tune)",
                path.display()
            ),
        });
    }
    let dtype = if p.f32 { ComputeDtype::F32 } else { ComputeDtype::Native };
    let kernel = QuantKernel::from_name(&p.kernel)
        .ok_or_else(|| EngineError::Peer { reason: format!("unknown kernel {:?}", p.kernel) })?;
    let mut model = stage(path, dtype, kernel)?;
    let layers = usize::try_from(model.config().text.num_hidden_layers).unwrap_or(0);
    if layers != p.layers {
        return Err(EngineError::Peer {
            reason: format!("this Mac's copy of {} has {layers} layers, the host's {}", path.display(), p.layers),
        });
    }
    if p.first_layer == 0 || p.first_layer >= layers {
        return Err(EngineError::Peer {
            reason: format!("layer {} is not a split point of {layers} layers", p.first_layer),
        });
    }
    model.keep_layers(p.first_layer..layers)?;
    model.check_kv_format(p.kv)?;
    materialize(&model, path)?;
    Ok((model, p.first_layer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_header_is_bounded_by_the_placement() {
        let forward = Op::Forward as i32;
        let ok = pass(&[forward, 1, 7, 100, 0], 4096).unwrap().unwrap();
        assert_eq!(ok, Pass { batch: 1, rows: 7, offset: 100, all: false });
        assert_eq!(pass(&[Op::End as i32, 0, 0, 0, 0], 4096).unwrap(), None);
        let refused = |header: &[i32], field: &str| {
            let e = pass(header, 4096).unwrap_err();
            assert!(matches!(&e, EngineError::BadPlacement { field: f, .. } if *f == field), "{header:?}: {e}");
        };
        refused(&[forward, 1, 4 << 20, 0, 1], "pass.rows");
        refused(&[forward, 1, 0, 0, 1], "pass.rows");
        refused(&[forward, 1, 16, 4090, 1], "pass.offset");
        refused(&[forward, 1, 16, -5, 1], "pass.offset");
        refused(&[forward, 1, 16, i32::MAX, 1], "pass.offset");
        refused(&[forward, 64, 16, 0, 1], "pass.batch");
        refused(&[7, 1, 16, 0, 1], "pass.op");
        assert!(pass(&[forward, 1], 4096).is_err());
    }
}
