//! [`Slots`]: places for connections, bounded in total and per IP address, so that one
//! source cannot take them all. A listener bounds its MPA handshakes in progress with it;
//! iwarpd bounds the connections it serves.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// A bounded set of places, per IP address and in total.
#[derive(Debug)]
pub struct Slots {
    max_total: usize,
    max_per_address: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Why there was no place.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// All places are taken (the total limit).
    Total(usize),
    /// All places one address may take are taken.
    Address(usize),
}

/// One place; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    ip: IpAddr,
}

impl Slots {
    /// At most `max_total` places, at most `max_per_address` of them for one address
    /// (both at least 1).
    pub fn new(max_total: usize, max_per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
            counts: Mutex::default(),
        })
    }

    /// A place for `ip`, or why there is none.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
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
            slots: self.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.slots.counts.lock().unwrap_or_else(|e| e.into_inner());
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
        let p = Slots::new(3, 2);
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
