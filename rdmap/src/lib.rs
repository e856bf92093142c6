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
//!
//! # Quick start
//!
//! Two endpoints in memory: the MPA handshake, then an RDMA Write whose bytes are carried by
//! hand from one stream to the other (the engine does this with TCP sockets).
//!
//! ```
//! use std::time::Instant;
//! use bytes::{Bytes, BytesMut};
//! use mpa::{Handshake, HandshakeEvent, MpaConfig};
//! use rdmap::testing::VecMemory;
//! use rdmap::{Access, Payload, RemoteBuf, STag, SendFlags, SendOp, SendWr, Stream, StreamConfig, Transmit};
//!
//! let now = Instant::now();
//! let mut client = Handshake::initiator(MpaConfig::default(), b"hello", now).unwrap();
//! let mut server = Handshake::responder(MpaConfig::default(), now);
//! let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
//! let _ = client.poll_transmit(&mut to_server);
//! server.handle_input(&mut to_server, now);
//! assert!(matches!(server.poll_event(), Some(HandshakeEvent::Request(_))));
//! server.accept(b"").unwrap();
//! let _ = server.poll_transmit(&mut to_client);
//! client.handle_input(&mut to_client, now);
//! let negotiated = |h: &mut Handshake| loop {
//!     if let Some(HandshakeEvent::Established { negotiated, .. }) = h.poll_event() {
//!         break negotiated;
//!     }
//! };
//! let mut a = Stream::new(StreamConfig::default(), &negotiated(&mut client));
//! let mut b = Stream::new(StreamConfig::default(), &negotiated(&mut server));
//!
//! let (mut mem_a, mut mem_b) = (VecMemory::new(), VecMemory::new());
//! let target = STag::new(7, 0x01);
//! mem_b.register(target, 0x1000, 64, 0, Access::REMOTE_WRITE);
//! a.post_send(SendWr {
//!     wr_id: 1,
//!     op: SendOp::Write {
//!         data: Payload::Bytes(Bytes::from_static(b"one-sided")),
//!         dst: RemoteBuf { stag: target, to: 0x1000, len: 64 },
//!     },
//!     flags: SendFlags::SIGNALED,
//! })
//! .unwrap();
//!
//! let mut out = Transmit::new();
//! let n = a.poll_transmit(&mut mem_a, &mut out, usize::MAX);
//! let mut wire = BytesMut::from(out.take(n).as_ref()); // what TCP would carry
//! a.handle_written(n); // the socket took every octet
//! b.handle_input(&mut wire, &mut mem_b);
//! assert_eq!(&mem_b.bytes(target)[..9], b"one-sided");
//! assert!(matches!(a.poll_event(), Some(rdmap::Event::Completion(wc)) if wc.is_ok()));
//! ```
#![forbid(unsafe_code)]

pub mod atomic;
mod memory;
pub mod pushed;
mod qp;
mod sgl;
mod stream;
pub mod term;
pub mod testing;
pub mod wire;
mod work;

pub use ddp::{Access, Base, STag};
pub use memory::{AccessError, LocalOps, Memory, MemoryOps, NoSharedRecv, SharedRecv};
pub use mpa::{Extensions, Framing, Refused};
pub use qp::{QpEnd, QpNum};
pub use sgl::{SGL_INLINE, Sge, Sgl};
pub use stream::SnapshotError;
pub use stream::{
    DirectTarget, Event, OPCODES, PostError, QpState, Stream, StreamConfig, StreamStats, Transmit,
};
pub use term::TermCode;
pub use work::{
    Bind, Completion, FastReg, Payload, Queue, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr,
    WcOpcode, WcStatus, WrId,
};
