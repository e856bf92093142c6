//! [`Timeouts`]: how long a connection may go without progress before the engine ends it
//! (RFC 5044 §7.1.2 asks for timeouts at every stage; the MPA handshake has its own in
//! [`MpaConfig::timeout`](mpa::MpaConfig::timeout), TCP its keepalive in
//! [`SocketOptions`](crate::SocketOptions)).

use std::time::Duration;

use tokio::time::Instant;

/// Liveness limits of every connected queue pair. Progress is any octet read from or
/// written to the socket.
///
/// Defaults: `idle` off, `stall` 60 s.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// With nothing outstanding in either direction, no octet moved for this long: the
    /// connection is ended ([`QpEnd::TimedOut`](crate::QpEnd::TimedOut)). Off by default,
    /// since an application's connection may rightly stay quiet for hours; a service that
    /// must not be held by silent clients (iwarpd) turns it on.
    pub idle: Option<Duration>,
    /// With something outstanding (a partial FPDU received, a posted request not complete,
    /// a response owed, octets TCP has not taken), no octet moved for this long: the queue
    /// pair ends in Error ([`QpEnd::TimedOut`](crate::QpEnd::TimedOut)) and its work is
    /// flushed. It catches a peer that stops in the middle of an FPDU, one that never
    /// answers a Read, and one that stops reading.
    pub stall: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            idle: None,
            stall: Some(Duration::from_secs(60)),
        }
    }
}

/// Which limit ran out.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// [`Timeouts::idle`].
    Idle,
    /// [`Timeouts::stall`].
    Stalled,
}

impl Timeouts {
    /// When the connection expires if nothing moves after `progress_at`, and why: `busy`
    /// says whether anything is outstanding.
    pub(crate) fn deadline(&self, progress_at: Instant, busy: bool) -> Option<(Instant, Expiry)> {
        let (limit, why) = if busy {
            (self.stall?, Expiry::Stalled)
        } else {
            (self.idle?, Expiry::Idle)
        };
        Some((progress_at + limit, why))
    }
}
