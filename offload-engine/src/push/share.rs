//! The engine's side of seed 000's push path: each protection domain's push region and
//! the resources every pushed message needs, shared by all queue pairs (of iwarpd's
//! clients, or of an embedded engine).
//!
//! - **Tracking entries** (D1/D2): a pushed message holds one from the moment it is
//!   admitted until its request completes; when all are taken, pushes are discarded.
//! - **Transmit credits** (D5): a token bucket of octets set aside for pushed traffic,
//!   refilled at a fixed rate up to a cap from the clock, independently of push
//!   processing; a message whose octets exceed what is left is discarded.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use ipc::push::PushRegion;
use ipc::qpseg::{Discard, PushCounters, SQE_SIZE};
use ipc::wqe::{Data, decode_sqe};
use rdmap::SendWr;

/// The push settings of a daemon.
#[derive(Clone, Debug)]
pub struct PushConfig {
    /// Slots in each domain's push region: the writers expected to push at once.
    pub slots: u32,
    /// Pushed messages in flight at once, over every client (tracking entries).
    pub tracking: usize,
    /// Octets of transmit credit the push share holds at most.
    pub credit_cap: u64,
    /// Octets of credit added per second.
    pub credit_rate: u64,
    /// Share each connection's socket with the application that owns the queue pair,
    /// when it asks, so that it writes small messages itself (the push path that skips
    /// the daemon). Never for a privileged port unless the application runs as root.
    pub share_socket: bool,
}

impl Default for PushConfig {
    fn default() -> Self {
        Self {
            slots: ipc::push::DEFAULT_SLOTS,
            tracking: 256,
            credit_cap: 1 << 20,
            credit_rate: 4 << 30,
            share_socket: true,
        }
    }
}

/// The resources pushed messages draw on, shared by every servant, and the device's push
/// counters.
#[derive(Debug)]
pub struct PushShare {
    /// Its settings.
    pub cfg: PushConfig,
    in_flight: AtomicUsize,
    credits: Mutex<Bucket>,
    /// Requests executed from pushed messages, from the send queue, then discards by
    /// reason ([`Discard::ALL`] order), over every queue pair the daemon has had.
    totals: [AtomicU64; 8],
}

#[derive(Debug)]
struct Bucket {
    tokens: u64,
    at: Instant,
}

impl PushShare {
    /// The resources `cfg` sets aside: its credits full, nothing tracked.
    pub fn new(cfg: PushConfig) -> Self {
        Self {
            credits: Mutex::new(Bucket {
                tokens: cfg.credit_cap,
                at: Instant::now(),
            }),
            in_flight: AtomicUsize::new(0),
            cfg,
            totals: Default::default(),
        }
    }

    /// Counts requests executed from pushed messages and from the send queue.
    pub fn count_executed(&self, pushed: u64, sq_path: u64) {
        self.totals[0].fetch_add(pushed, Ordering::Relaxed);
        self.totals[1].fetch_add(sq_path, Ordering::Relaxed);
    }

    /// Counts a discarded pushed message.
    pub fn count_discard(&self, why: Discard) {
        self.count_discards(why, 1);
    }

    /// Counts `n` discarded pushed messages.
    pub fn count_discards(&self, why: Discard, n: u64) {
        self.totals[2 + why.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// The device's push counters.
    pub fn totals(&self) -> PushCounters {
        read_counters(&self.totals)
    }

    /// Seed 000's admission checks of the pushed message `entry` (a send queue entry
    /// copied out of its slot), in the seed's order, the same embedded and in iwarpd:
    /// it decodes to a request that may be pushed, its payload inline (copied into
    /// `arena`); D3, `at_head`: its twin is next in the send queue and nothing of the
    /// queue pair is part-way through transmission; D4, `backlogged()` is false: the
    /// connection is not back-pressured; then [`admit`](Self::admit) (D1/D2, D5). On
    /// success, the request to execute, holding a tracking entry.
    pub fn admit_message(
        &self,
        entry: &[u8; SQE_SIZE],
        arena: &mut BytesMut,
        at_head: Result<(), Discard>,
        backlogged: impl FnOnce() -> bool,
        now: Instant,
    ) -> Result<SendWr, Discard> {
        let wr = decode_sqe(entry, &mut |d| match d {
            Data::Inline(b) => Some(carve(arena, b)),
            Data::Staged { .. } => None,
        })
        .map_err(|_| Discard::Malformed)?;
        let octets = pushed_octets(&wr).ok_or(Discard::Malformed)?;
        at_head?;
        if backlogged() {
            return Err(Discard::FlowControl);
        }
        self.admit(octets, now)?;
        Ok(wr)
    }

    /// The last admission checks of a pushed message of `octets` payload octets, in the
    /// seed's order: a tracking entry (D1/D2), then transmit credit for the message and
    /// its headers (D5). On success the message holds a tracking entry until
    /// [`untrack`](Self::untrack).
    pub fn admit(&self, octets: u64, now: Instant) -> Result<(), Discard> {
        if !self.track() {
            return Err(Discard::TrackingFull);
        }
        if !self.credit(octets + 64, now) {
            self.untrack();
            return Err(Discard::NoCredits);
        }
        Ok(())
    }

    /// Takes a tracking entry (D1/D2), or `false` if all are in use.
    fn track(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cfg.tracking).then_some(n + 1)
            })
            .is_ok()
    }

    /// Takes `n` tracking entries for pushed requests already executed (by a daemon
    /// before this one), whatever the limit: they are in flight.
    pub fn retrack(&self, n: usize) {
        self.in_flight.fetch_add(n as _, Ordering::AcqRel);
    }

    /// Returns a tracking entry (never below none: a pushed request that was in flight
    /// when its session moved in, and was not counted, cannot wrap the count and stop
    /// every push).
    pub fn untrack(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Takes `octets` of transmit credit at time `now` (D5), or `false` if there is not
    /// that much.
    fn credit(&self, octets: u64, now: Instant) -> bool {
        let mut b = self.credits.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(b.at);
        let add = (elapsed.as_nanos() * u128::from(self.cfg.credit_rate) / 1_000_000_000) as u64;
        if add > 0 {
            b.tokens = (b.tokens + add).min(self.cfg.credit_cap);
            b.at = now;
        }
        if b.tokens < octets {
            return false;
        }
        b.tokens -= octets;
        true
    }
}

/// Copies `b` into a `Bytes` carved from `arena`: one allocation per 64 KiB of payloads
/// (a fresh arena once the old one is full and still referenced by requests in flight),
/// not one per request.
pub fn carve(arena: &mut BytesMut, b: &[u8]) -> Bytes {
    if arena.capacity() < b.len() {
        arena.reserve(b.len().max(64 << 10));
    }
    arena.extend_from_slice(b);
    arena.split().freeze()
}

/// The payload octets of a request that may be executed from a pushed message (a Send or
/// Write with its payload inline, or Immediate Data); `None` for any other, which a
/// pushed message must not carry.
pub fn pushed_octets(wr: &SendWr) -> Option<u64> {
    use rdmap::{Payload, SendOp};
    match &wr.op {
        SendOp::Send {
            data: Payload::Bytes(b),
            ..
        }
        | SendOp::Write {
            data: Payload::Bytes(b),
            ..
        } => Some(b.len() as u64),
        SendOp::Immediate { .. } => Some(8),
        _ => None,
    }
}

/// A protection domain's push region and the queue pairs of the domain.
#[derive(Debug)]
pub struct PdPush {
    /// The domain's push region.
    pub region: PushRegion,
    qps: Mutex<HashSet<u32>>,
}

impl PdPush {
    /// A domain's push region, with no queue pair yet.
    pub fn new(region: PushRegion) -> Self {
        Self {
            region,
            qps: Mutex::new(HashSet::new()),
        }
    }

    /// `qp` is a queue pair of this domain from now on.
    pub fn add_qp(&self, qp: u32) {
        self.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(qp);
    }

    /// `qp` is no longer a queue pair of this domain.
    pub fn remove_qp(&self, qp: u32) {
        self.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&qp);
    }

    /// True if `qp` is a queue pair of this domain (D6).
    pub fn has_qp(&self, qp: u32) -> bool {
        self.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&qp)
    }
}

/// Push counters kept as atomics in the order executed, from the send queue, then the
/// discards by reason (a device's totals, or one queue pair's).
pub(crate) fn read_counters(words: &[AtomicU64; 8]) -> PushCounters {
    let get = |i: usize| words[i].load(Ordering::Relaxed);
    PushCounters {
        executed: get(0),
        sq_path: get(1),
        discards: std::array::from_fn(|i| get(2 + i)),
        daemon_sleeps: 0,
        daemon_reads: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn tracking_entries_and_credits_run_out_and_come_back() {
        let share = PushShare::new(PushConfig {
            slots: 4,
            tracking: 2,
            credit_cap: 1000,
            credit_rate: 1000,
            share_socket: false,
        });
        assert!(share.track() && share.track());
        assert!(!share.track());
        share.untrack();
        assert!(share.track());
        // Returning more than were taken (a request pushed before its session moved in)
        // leaves none taken, not a wrapped count that refuses every push.
        for _ in 0..3 {
            share.untrack();
        }
        assert!(share.track() && share.track() && !share.track());
        let t0 = Instant::now();
        assert!(share.credit(600, t0));
        assert!(!share.credit(600, t0), "400 left");
        // Half a second refills 500 octets, capped at 1000.
        assert!(share.credit(900, t0 + Duration::from_millis(500)));
        assert!(share.credit(1000, t0 + Duration::from_secs(60)));
    }
}
