//! The lender's side of a session: loads the layer range the host placed
//! here, joins the ring, and runs those layers for every pass until the
//! host ends the session (or the ring fails). Runs in a process of its own
//! (`headroom lend` starts one per session), so a dead or stuck ring never
//! takes the lending app down.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use mlx_rs::{Array, Dtype};

use super::host::free_address;
use super::protocol::{self, Placement, Reply};
use super::ring::Ring;
use super::{Op, HEADER_LEN, STEPPED_ASIDE};
use crate::error::{EngineError, MlxContext, Result};
use crate::layers::last_position;
use crate::loader::{materialize, stage};
use crate::quant::QuantKernel;
use crate::weights::ComputeDtype;

/// A lender waits this long for the host between passes before it gives
/// the session up (the host keeps it for as long as its model is loaded).
const IDLE_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);

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
pub fn serve(mut control: TcpStream, placement: &Placement, tight: &mut dyn FnMut() -> bool) -> Result<Served> {
    let loaded = load(placement);
    let (model, first) = match loaded {
        Ok(v) => v,
        Err(e) => {
            let _ = protocol::send(&mut control, &Reply::Refused { message: e.to_string() });
            return Err(e);
        }
    };
    let local = control.local_addr().map_err(|e| EngineError::Peer { reason: format!("no local address: {e}") })?;
    let ring_addr = free_address(local.ip())?;
    protocol::send(&mut control, &Reply::Placed { ring: ring_addr.clone() })?;
    let ring = Ring::join(&placement.host_ring, &ring_addr, 1, IDLE_DEADLINE)?;
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
        let header: Vec<i32> = header.as_slice::<i32>().to_vec();
        let &[op, b, l, offset, all] = header.as_slice() else {
            return Err(EngineError::Peer { reason: format!("a pass header of {} fields", header.len()) });
        };
        if op == Op::End as i32 {
            return Ok(served);
        }
        if op != Op::Forward as i32 || b < 1 || l < 1 {
            return Err(EngineError::Peer { reason: format!("a pass header this version does not know: {header:?}") });
        }
        // Roll back to the host's length: a new turn (0), or past proposals it rejected.
        let offset = usize::try_from(offset).unwrap_or(0);
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
            let shape = [b, if all != 0 { l } else { 1 }, hidden];
            ring.send(&Array::zeros::<f32>(&shape).op("zeros")?.as_dtype(dtype).op("zeros")?)?;
            ring.send(&Array::from_slice(&[STEPPED_ASIDE], &[1]))?;
            served.stepped_aside = true;
            return Ok(served);
        }
        let started = Instant::now();
        let out = stages.blocks(h, &mut cache)?;
        cache.maybe_quantize()?;
        let out = if all != 0 { out } else { last_position(&out)? };
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
