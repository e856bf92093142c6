//! The split driver's ABI (seed 002): what an application's `verbs` library and the local
//! `iwarpd` say to each other.
//!
//! - [`control`]: the control channel (channel 0), a Unix stream socket: requests with a
//!   function code, a protocol version and a transaction context echoed in the reply;
//!   events; memory files passed with `SCM_RIGHTS` ([`channel`]).
//! - [`qpseg`]: the data channel (channel 1) of one queue pair, a shared-memory segment
//!   of rings with no per-message framing, and eventfd doorbells rung only when the other
//!   side is parked.
//! - [`srq`]: a shared receive queue's ring, read by the daemon as buffers are needed.
//! - [`wqe`]: the fixed layouts of send, receive and completion entries.
//! - [`push`]: seed 000's push region, one per protection domain: slots where the library
//!   writes a small request whole, after its twin send queue entry, for the daemon to
//!   send without looking at the send queue.
//!
//! Both directions push (seed 002's push-push): the library pushes work requests and
//! their inline data into the rings; the daemon pushes completions into the completion
//! ring and received payloads straight into the application's registered memory, which it
//! maps from the memory file handed over at registration. Neither side ever asks the
//! other for data. Everything one side reads from the other is copied out first and
//! checked; nothing it finds can make it panic or touch memory outside the segment.

pub mod channel;
mod codec;
pub mod control;
mod doorbell;
mod layout;
pub mod push;
pub mod qpseg;
mod ring;
pub mod srq;
pub mod wqe;

pub use codec::Malformed;

use std::path::PathBuf;

/// Where `iwarpd` listens for local applications unless told otherwise:
/// `/run/iwarpd.sock` for root, else `$XDG_RUNTIME_DIR/iwarpd.sock`, else
/// `/tmp/iwarpd-UID.sock`.
pub fn default_control_path() -> PathBuf {
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return PathBuf::from("/run/iwarpd.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("iwarpd.sock"),
        _ => PathBuf::from(format!("/tmp/iwarpd-{}.sock", uid.as_raw())),
    }
}
