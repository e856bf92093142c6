//! Seed 000's push path, one implementation for both modes: a small request is written
//! whole into a slot of its protection domain's push region and executed from there if
//! it passes the admission checks, else its twin runs from the send queue. This module
//! owns the push resources, the embedded engine's push decision and the shared socket
//! that lets an application write pushed messages itself:
//!
//! - `share`: the engine's side: each domain's push region ([`PdPush`]) and what every
//!   pushed message draws on ([`PushShare`]: tracking entries, transmit credits, the
//!   admission checks), shared by iwarpd's servants and embedded queue pairs;
//! - `qp`: a queue pair's part (`QpPush`): the library's rules and the engine's
//!   scan and admission on an in-process region, run by the posting thread;
//! - `tx_share`: the socket shared with the application that owns the queue pair, and
//!   the transmit lock both writers take (the push path that skips the daemon).
//!
//! The connection acts on `QpPush::offer`'s decision in `conn/connection/push_post.rs`,
//! a part of the connection because it changes the connection's private state. The
//! inline doorbell (`conn/connection/inline_tx.rs`) is not part of the push path.

mod qp;
mod share;
mod tx_share;

pub(crate) use qp::{ConnView, Offer, QpPush};
pub use share::{PdPush, PushConfig, PushShare, carve, pushed_octets};
pub(crate) use tx_share::{Gate, SharedTx};
