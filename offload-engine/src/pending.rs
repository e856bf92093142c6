//! [`Pending`]: the connections a listener holds in the MPA handshake, bounded in total
//! and per IP address, so that one source cannot hold them all.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Counts of handshakes in progress.
#[derive(Debug)]
pub(crate) struct Pending {
    max_total: usize,
    max_per_address: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Why a connection was not let in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The listener's limit of handshakes in progress.
    Total(usize),
    /// The limit for one address.
    Address(usize),
}

/// One handshake's place; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    pending: Arc<Pending>,
    ip: IpAddr,
}

impl Pending {
    pub(crate) fn new(max_total: usize, max_per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
            counts: Mutex::default(),
        })
    }

    /// A place for a handshake from `ip`, or why there is none.
    pub(crate) fn enter(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if c.total >= self.max_total {
            return Err(Refused::Total(self.max_total));
        }
        let n = c.by_address.entry(ip).or_default();
        if *n >= self.max_per_address {
            return Err(Refused::Address(self.max_per_address));
        }
        *n += 1;
        c.total += 1;
        Ok(Slot {
            pending: self.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self
            .pending
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        c.total -= 1;
        if let Some(n) = c.by_address.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.by_address.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_in_total_and_per_address_and_places_come_back() {
        let p = Pending::new(3, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = p.enter(a).unwrap();
        let a2 = p.enter(a).unwrap();
        assert_eq!(p.enter(a).unwrap_err(), Refused::Address(2));
        let b1 = p.enter(b).unwrap();
        assert_eq!(p.enter(b).unwrap_err(), Refused::Total(3));
        drop(a1);
        let b2 = p.enter(b).unwrap();
        drop((a2, b1, b2));
        let c = p.counts.lock().unwrap();
        assert_eq!((c.total, c.by_address.len()), (0, 0));
    }
}
