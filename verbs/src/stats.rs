//! The counters of a queue pair, as [`Qp::stats`](crate::Qp::stats) and iwarpd report them,
//! and the names of their rows.

/// A queue pair's counters, from [`Qp::stats`](crate::Qp::stats): its traffic (`stats.traffic`: FPDUs,
/// octets per RDMAP opcode, octets moved in place, Terminates) and seed 000's push path
/// (`stats.push`: requests executed from pushed messages and from the send queue, and
/// discards by reason). The same struct iwarpd sends on its control socket.
pub type QpStats = ipc::control::Counters;

/// The RDMAP opcodes of a [`QpStats`]'s `traffic.octets_sent` and `traffic.octets_received`, in
/// order (the names Wireshark's iwarp-rdmap dissector shows, and this stack's extension's).
pub const OPCODE_NAMES: [&str; 16] = [
    "Write",
    "Read Request",
    "Read Response",
    "Send",
    "Send with Invalidate",
    "Send with SE",
    "Send with SE and Invalidate",
    "Terminate",
    "Immediate Data",
    "Immediate Data with SE",
    "Atomic Request",
    "Atomic Response",
    "Send with Immediate Data",
    "Send with Invalidate and Immediate Data",
    "Send with SE and Immediate Data",
    "Send with SE, Invalidate and Immediate Data",
];

/// The reasons of a [`QpStats`]'s `push.discards`, in order: the twin request was not at the
/// head of the send queue (or one was part-way through transmission), the connection was
/// back-pressured, no tracking entry was free, the push share had no transmit credit, the
/// message named a queue pair outside its domain, the message was malformed.
pub const PUSH_DISCARD_REASONS: [&str; 6] = [
    "not_at_head",
    "flow_control",
    "tracking_full",
    "no_credits",
    "security",
    "malformed",
];
