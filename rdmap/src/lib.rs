//! Sans-IO RDMAP (RFC 5040) with the RFC 7306 extensions (Atomics, Immediate Data), and the
//! per-QP stream state machine that runs RDMAP over [`ddp`] over [`mpa`].
//!
//! ```text
//!   work requests ─▶ Stream::post_send / post_recv
//!   TCP bytes in  ─▶ Stream::handle_input ──▶ Memory (placement, checks)
//!   TCP accepted  ─▶ Stream::handle_written
//!                    Stream::poll_transmit ─▶ FPDU bytes out
//!                    Stream::poll_event    ─▶ completions, Terminates, state changes
//! ```
//!
//! - [`wire`]: typed views and `Repr`s for every RDMAP header (Read Request, Terminate,
//!   Atomic Request/Response, Immediate Data) and the opcode table.
//! - [`term`]: every Terminate layer/type/code of RFC 5040, 5041, 5044 and 6581.
//! - [`atomic`]: the RFC 7306 masked Fetch-and-Add and Compare-and-Swap arithmetic.
//! - [`Stream`]: one connection in FPDU mode; [`Memory`] is how it reaches registered memory.
//! - [`testing`]: a vector-backed [`Memory`] and a seeded generator for tests and fuzzing.
//!
//! Nothing here reads a clock, opens a socket or spawns a task.
#![forbid(unsafe_code)]

pub mod atomic;
mod memory;
mod stream;
pub mod term;
pub mod testing;
pub mod wire;
mod work;

pub use ddp::{Access, STag};
pub use memory::{AccessError, Memory};
pub use stream::{Event, PostError, QpState, Stream, StreamConfig, StreamStats};
pub use term::TermCode;
pub use work::{
    Completion, Payload, Queue, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcOpcode,
    WcStatus, WrId,
};
