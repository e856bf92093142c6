//! The software RNIC: iWARP over kernel TCP, driven by tokio.
//!
//! ```text
//!   Engine ── Tpt (protection domains, regions, windows; STag = index << 8 | instance)
//!     │
//!     ├── connect / listen+accept ── TCP + MPA exchange (mpa::Handshake)
//!     │                                  │
//!     │                                  ▼
//!     └── Qp ── post_send/post_recv ── Stream (rdmap, sans-IO) ◀── driver task ── TcpStream
//!                                          │                          (read, vectored write,
//!                                          ▼                           timers)
//!                                      Cq (completions, solicited events)
//! ```
//!
//! Each connected queue pair has one driver task. It reads socket bytes into the stream,
//! which places tagged data straight into registered memory through the TPT (one copy,
//! from the socket buffer). It writes the stream's FPDUs with vectored writes: large
//! payloads go from the application's `Bytes` to the socket without a user-space copy. It
//! also runs the timers and moves completions to the completion queues.
//!
//! A send-side request (Send, Write, Immediate Data) completes when the TCP socket has
//! accepted all of its octets, as in siw. Reads and Atomics complete when their response
//! has been placed.
#![forbid(unsafe_code)]

mod cm;
mod conn;
mod dual_stack;
mod engine;
mod log_limit;
mod migration;
mod net;
mod pcap;
pub mod push;
mod slots;
mod srq;
mod stats;
mod timeouts;
pub mod tpt;

pub use cm::{Incoming, Listener};
pub use conn::{CompletionSink, Completions, Qp, QpEnd, QpNum};
pub use cq::{CompletionFuture, Cq, CqError, NOTIFY_BIT, Waiters, Wc};
pub use engine::{Engine, EngineConfig, QpInit};
pub use log_limit::LogLimit;
pub use migration::{
    ExportedPd, ImportError, ImportQueues, Imported, MigrateError, Migrated, ParkedPd, StagedPd,
};
pub use mpa::ConnectError;
pub use net::SocketOptions;
pub use pcap::CaptureTap;
pub use push::PushConfig;

pub use rdmap;
pub use slots::{Refused, Slot, Slots};
pub use srq::{Srq, SrqFeed};
pub use stats::EngineStats;
pub use timeouts::Timeouts;
