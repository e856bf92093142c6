//! An engine's counters: what its queue pairs that are gone leave behind ([`Totals`],
//! which every connection's home points at) and what [`Engine::stats`] reports
//! ([`EngineStats`]).
//!
//! [`Engine::stats`]: crate::Engine::stats

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rdmap::StreamStats;

/// What the queue pairs that are gone leave behind: their counters, summed.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    /// Connections that reached FPDU mode.
    connections: AtomicU64,
    /// Reads that a driver's busy poll found (see [`EngineStats::busy_polled_reads`]).
    busy_polled: AtomicU64,
    retired: Mutex<(u64, StreamStats)>,
}

impl Totals {
    /// Counts a connection that reached FPDU mode.
    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts input a driver's busy poll found.
    pub(crate) fn busy_polled(&self) {
        self.busy_polled.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads that drivers' busy polls found.
    pub(crate) fn busy_polled_reads(&self) -> u64 {
        self.busy_polled.load(Ordering::Relaxed)
    }

    /// Connections that reached FPDU mode.
    pub(crate) fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// The queue pairs that are gone, and their traffic summed.
    pub(crate) fn retired(&self) -> (u64, StreamStats) {
        let r = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        (r.0, r.1)
    }

    /// Adds the counters of a queue pair that is gone.
    pub(crate) fn retire(&self, stats: &StreamStats) {
        let mut r = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        r.0 += 1;
        r.1.add(stats);
    }
}

/// An engine's counters, from [`Engine::stats`](crate::Engine::stats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Connections that reached FPDU mode since the engine started.
    pub connections: u64,
    /// Queue pairs that are gone from here: closed and released, or moved away (a queue
    /// pair that moved in counts here when it goes, so with moves this can exceed
    /// `connections`).
    pub connections_closed: u64,
    /// Queue pairs here now, those that moved in included.
    pub queue_pairs: u64,
    /// The traffic of every queue pair, live and gone: FPDUs, octets per opcode,
    /// Terminates sent and received.
    pub traffic: StreamStats,
    /// Seed 000's push path over every queue pair: requests executed from pushed
    /// messages, from the send queue, and discards by reason.
    pub push: ipc::qpseg::PushCounters,
    /// Input that a connection's driver found by busy polling after a response
    /// ([`SocketOptions::busy_poll`](crate::SocketOptions::busy_poll)), each a runtime
    /// wake-up saved.
    pub busy_polled_reads: u64,
}
