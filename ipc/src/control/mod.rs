//! The control channel (seed 002's channel 0): requests from a client, one reply each, and
//! events the daemon sends on its own, over a Unix stream socket.
//!
//! Every message starts with the same 16-octet [`Header`]: length, function code
//! ([`func`]), protocol version ([`VERSION`]) and transaction context, little-endian.
//!
//! A reply's body starts with a u16 status: 0, then the result; or an error code, then a
//! length-prefixed UTF-8 text that names the cause and the fix. Memory files travel as
//! `SCM_RIGHTS` with the message that names them: one with [`Request::RegMr`], three with
//! a queue pair reply (its segment, then the two doorbells), one with a protection
//! domain's reply (its push region) and one with a shared receive queue's (its ring).
//!
//! A fixed little-endian layout (not a serialization crate): the messages are few and
//! small, the format is the ABI between two builds that may differ, and every field is
//! tested against literal octets. One file per concern:
//!
//! - `header.rs`: the header, its fields named in a `field` module;
//! - `func.rs`, `error.rs`: function codes and reply error codes;
//! - `request/`: [`Request`]s and the memory files they carry;
//! - `reply.rs`: [`Reply`]s;
//! - `event.rs`: [`Event`]s and how a queue pair ended ([`end`]);
//! - `qp.rs`: what requests and replies say about a queue pair ([`QueueDepths`],
//!   [`QpChange`], [`QpInfo`]);
//! - `counters.rs`, `device.rs`: a queue pair's and a device's [`Counters`], a device's
//!   limits ([`DeviceAttrs`]);
//! - `listing.rs`: what `iwarpd stat` lists (the daemon's services and queue pairs).

mod counters;
mod device;
pub mod error;
mod event;
pub mod func;
mod header;
mod listing;
mod qp;
mod reply;
mod request;

pub use counters::{Counters, DeviceCounters, OPCODES};
pub use device::DeviceAttrs;
pub use event::{Event, end};
pub use header::{HEADER_LEN, Header};
pub use listing::{
    LOCAL_SERVICE, MAX_QPS_PER_PAGE, MAX_SERVICE_NAME, QpListing, QpPage, QpStateCode,
    ServiceCounters,
};
pub use qp::{QpChange, QpInfo, QueueDepths};
pub use reply::{Reply, reply_fds};
pub use request::{BASE_VA, BASE_ZERO, Request, request_fds};

/// The protocol version this build speaks.
pub const VERSION: u16 = 8;
/// The longest message either side accepts.
pub const MAX_MESSAGE: usize = 64 << 10;
/// Receives a connect or accept request may post before the connection carries data.
pub const MAX_INITIAL_RECVS: usize = 128;
/// Private data carried by connect, accept and reject (the MPA limit).
pub const MAX_PRIVATE_DATA: usize = 512;
