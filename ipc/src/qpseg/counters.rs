//! Seed 000's push path as a queue pair segment counts it: why the daemon discarded a
//! pushed message, and how many requests each path executed.

/// Why the daemon discarded a pushed message (seed 000's conditions, section 1.6).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Discard {
    /// D3: the twin entry was not at the head of the send queue, or a request of the
    /// queue pair was part-way through transmission.
    NotAtHead,
    /// D4: the connection is back-pressured (octets waiting for socket room).
    FlowControl,
    /// D1/D2: no tracking entry free (too many pushed messages in flight).
    TrackingFull,
    /// D5: not enough transmit credits in the push share.
    NoCredits,
    /// D6: the slot names a queue pair outside the region's domain.
    Security,
    /// The slot's entry does not decode, or is not a request that may be pushed.
    Malformed,
}

impl Discard {
    /// Every reason, in counter order.
    pub const ALL: [Self; 6] = [
        Self::NotAtHead,
        Self::FlowControl,
        Self::TrackingFull,
        Self::NoCredits,
        Self::Security,
        Self::Malformed,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::NotAtHead => "not_at_head",
            Self::FlowControl => "flow_control",
            Self::TrackingFull => "tracking_full",
            Self::NoCredits => "no_credits",
            Self::Security => "security",
            Self::Malformed => "malformed",
        }
    }

    /// Its place in [`Self::ALL`] (and in the counters).
    pub fn index(self) -> usize {
        Self::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

/// A queue pair's push counters, kept by the daemon in the segment.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PushCounters {
    /// Requests executed from a pushed message.
    pub executed: u64,
    /// Requests executed from the send queue (pushed or not).
    pub sq_path: u64,
    /// Pushed messages discarded, by reason ([`Discard::ALL`] order).
    pub discards: [u64; 6],
    /// Times iwarpd's servant of this queue pair went to sleep on its doorbell (0
    /// embedded). It spins while its client posts or pushes, so that the peer's
    /// answers are taken by a thread that is awake: a count near the number of messages
    /// means each one paid a thread wake-up.
    pub daemon_sleeps: u64,
    /// Times that servant, spinning, read the peer's input from the socket itself and
    /// completed it into the client's ring (0 embedded): messages that reached the
    /// client with no thread woken on the way.
    pub daemon_reads: u64,
}

impl PushCounters {
    /// Discards of every reason.
    pub fn discarded(&self) -> u64 {
        self.discards.iter().sum()
    }

    /// Discards of `why`.
    pub fn discards_of(&self, why: Discard) -> u64 {
        self.discards[why.index()]
    }
}
