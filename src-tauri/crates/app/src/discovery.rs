//! Bonjour (mDNS-SD) for two Macs: a lender advertises itself as
//! `_headroom._tcp` with its machine's name and budget; a host lists what
//! answers (`headroom peers`). A convenience only: a lender that cannot
//! advertise still lends, and a host can always name one by address.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use mdns_sd::{ServiceDaemon, ServiceEvent, ServiceInfo};
use serde::Serialize;

/// The service type Headroom lenders advertise.
pub const SERVICE: &str = "_headroom._tcp.local.";

/// An advertisement, withdrawn when dropped.
pub struct Advert(ServiceDaemon);

impl std::fmt::Debug for Advert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Advert")
    }
}

impl Drop for Advert {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

/// A lender found on the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    /// Its machine's name, as it advertised it.
    pub machine: String,
    /// Where to reach it (`--peer`): an IPv4 address and its port.
    pub address: String,
    /// Its budget for a model when it started lending, bytes.
    pub budget_bytes: Option<u64>,
}

/// Advertises a lender listening at `ip:port` (every address of this Mac
/// for an unspecified `ip`).
pub fn advertise(machine: &str, ip: IpAddr, port: u16, budget_bytes: u64) -> Result<Advert, mdns_sd::Error> {
    let daemon = ServiceDaemon::new()?;
    // The instance name carries the port: two lenders on one Mac are two services.
    let instance = format!("{machine} {port}");
    let host: String = machine.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let host = format!("{host}.local.");
    let properties = [("machine", machine.to_owned()), ("budget", budget_bytes.to_string())];
    let info = if ip.is_unspecified() {
        ServiceInfo::new(SERVICE, &instance, &host, "", port, &properties[..])?.enable_addr_auto()
    } else {
        ServiceInfo::new(SERVICE, &instance, &host, ip, port, &properties[..])?
    };
    daemon.register(info)?;
    Ok(Advert(daemon))
}

/// The lenders that answer within `wait`, each once.
pub fn browse(wait: Duration) -> Result<Vec<Found>, mdns_sd::Error> {
    let daemon = ServiceDaemon::new()?;
    let events = daemon.browse(SERVICE)?;
    let until = Instant::now() + wait;
    let mut found: Vec<Found> = Vec::new();
    // One row per lender: a lender on every interface resolves once per
    // address, as the same service.
    let mut services = std::collections::HashSet::new();
    while let Ok(event) = events.recv_timeout(until.saturating_duration_since(Instant::now())) {
        let ServiceEvent::ServiceResolved(s) = event else { continue };
        let Some(ip) = s.get_addresses_v4().into_iter().min() else { continue };
        let address = format!("{ip}:{}", s.port);
        if found.iter().any(|f| f.address == address) || !services.insert(s.fullname.clone()) {
            continue;
        }
        let machine = s.get_property_val_str("machine").unwrap_or(&s.fullname).to_owned();
        let budget_bytes = s.get_property_val_str("budget").and_then(|b| b.parse().ok());
        found.push(Found { machine, address, budget_bytes });
    }
    let _ = daemon.shutdown();
    found.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(found)
}
