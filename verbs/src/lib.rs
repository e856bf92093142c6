//! The async verbs API: what applications use to do RDMA over iWARP.
//!
//! | type | what it is |
//! |---|---|
//! | [`Device`] | an RDMA device, the entry point: a software RNIC in this process, or the host's `iwarpd` |
//! | [`Pd`] | a protection domain: memory and queue pairs that may reach each other |
//! | [`Mr`] | a registered memory region: the application's memory, read and written in place |
//! | [`Mw`] | a memory window: part of a region exposed under its own STag |
//! | [`Cq`] | a completion queue, shared by many queue pairs |
//! | [`Srq`] | a shared receive queue |
//! | [`Listener`], [`Incoming`] | the passive side of connection setup |
//! | [`Qp`] | a connected queue pair: raw `post_*` verbs plus async per-request methods |
//! | [`RdmaStream`], [`RdmaListener`] | a byte stream over RDMA: `AsyncRead`/`AsyncWrite`, as `TcpStream` |
//!
//! Every handle is a cheap `Clone + Send + Sync` value with no lifetime parameter; buffers
//! cross the API owned ([`Bytes`](bytes::Bytes) to send, `Vec<u8>` to register). Each
//! operation has its own error type saying what went wrong and how to fix it.
//!
//! Completions come from a [`Cq`] for requests posted with [`Qp::post_send`] and
//! [`Qp::post_recv`] (the verbs model: batching, unsignaled requests, one CQ for many
//! queue pairs). The async methods ([`Qp::write`], [`Qp::read`], [`Qp::send`],
//! [`Qp::recv`], ...) route the completion of their one request to the returned future
//! instead. A Send or Write completes once the TCP socket accepted its octets (as in Linux
//! siw); a Read or Atomic once its response has been placed.
//!
//! # Where the engine runs
//!
//! The same program runs either way, chosen when the [`Device`] is opened:
//!
//! - **embedded** (the default): the engine runs inside this process, on its tokio runtime;
//! - **through `iwarpd`**, the host's daemon: set `IWARP_DEVICE=unix:/run/iwarpd.sock`
//!   (or `IWARP_DEVICE=unix` for the default socket) in the environment, or call
//!   [`DeviceConfig::daemon`]. The daemon holds the connections and places received data
//!   straight into this process's registered memory; work requests and completions
//!   cross in shared memory.
//!
//! `IWARP_DEVICE=embedded` (or unset) forces the engine in-process (built without the
//! default `embedded` feature, the library has no engine, and says to name an iwarpd);
//! any other value is
//! refused by [`Device::open`] with the forms it takes, so a typo never silently runs the
//! wrong device.
//!
//! # Errors in `main`
//!
//! Every error type of this crate has a `Display` that names the cause and the fix; the
//! `Debug` form is for logs. A `main` that returns `Result<(), Box<dyn Error>>` prints the
//! `Debug` form on failure, so print the `Display` form yourself:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     match verbs::Device::open(verbs::DeviceConfig::default()) {
//!         Ok(_device) => std::process::ExitCode::SUCCESS,
//!         Err(e) => {
//!             eprintln!("error: {e}");
//!             std::process::ExitCode::FAILURE
//!         }
//!     }
//! }
//! ```
//!
//! # Quick start
//!
//! Two devices in one process over loopback: connect with private data carrying a
//! [`RemoteBuf`], then an RDMA Write, an RDMA Read of it back, and a Send.
//!
//! ```
//! use std::net::SocketAddr;
//! use verbs::bytes::Bytes;
//! use verbs::{Access, Device, DeviceConfig, QpConfig, RecvWr, RemoteBuf};
//!
//! type Error = Box<dyn std::error::Error + Send + Sync>;
//!
//! # fn main() -> Result<(), Error> {
//! tokio::runtime::Runtime::new()?.block_on(async {
//!     let server = Device::open(DeviceConfig::default())?;
//!     let client = Device::open(DeviceConfig::default())?;
//!
//!     // Server: a region the client may read and write, advertised in the MPA Reply,
//!     // and a receive buffer posted (on a shared receive queue) before anyone connects.
//!     let spd = server.alloc_pd()?;
//!     let shared = spd.alloc_mr(64 << 10, Access::REMOTE_READ | Access::REMOTE_WRITE)?;
//!     let inbox = spd.alloc_mr(256, Access::LOCAL_WRITE)?;
//!     let (scq, srq) = (server.create_cq(16), server.create_srq(16)?);
//!     srq.post_recv(RecvWr { wr_id: 7, sgl: [inbox.local(..)].into() })?;
//!     let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
//!     let addr = listener.local_addr();
//!     let advert = shared.remote().encode();
//!     let config = QpConfig::new(&scq).srq(&srq);
//!     let accepting = tokio::spawn(async move {
//!         let incoming = listener.accept().await?;
//!         assert_eq!(&incoming.private_data()[..], b"hello");
//!         Ok::<_, Error>(incoming.accept(&spd, config, &advert).await?)
//!     });
//!
//!     // Client: connect, and learn from the Reply where to write.
//!     let cpd = client.alloc_pd()?;
//!     let ccq = client.create_cq(16);
//!     let conn = client.connect(&cpd, addr, QpConfig::new(&ccq), b"hello").await?;
//!     let remote = RemoteBuf::decode(&conn.private_data).ok_or("no RemoteBuf")?;
//!     let (qp, _server_qp) = (conn.qp, accepting.await??);
//!
//!     // One-sided: Write, then Read it back into a local region.
//!     qp.write(Bytes::from_static(b"one-sided hello"), remote).await?;
//!     let sink = cpd.alloc_mr(15, Access::LOCAL_WRITE)?;
//!     qp.read(remote.slice(0, 15), &sink).await?;
//!     assert_eq!(sink.read(..)?, b"one-sided hello");
//!     assert_eq!(shared.read(..15)?, b"one-sided hello");
//!
//!     // Two-sided: a Send lands in the server's posted buffer; its completion is on the CQ.
//!     qp.send(Bytes::from_static(b"ping")).await?;
//!     let wc = scq.next().await?;
//!     assert_eq!((wc.wc.wr_id, wc.wc.byte_len), (7, 4));
//!     assert_eq!(inbox.read(..4)?, b"ping");
//!     Ok(())
//! })
//! # }
//! ```
#![forbid(unsafe_code)]
// Without the engine, iwarpd is the one backend: matches on it cannot fail.
#![cfg_attr(
    not(feature = "embedded"),
    allow(irrefutable_let_patterns, unreachable_patterns)
)]

mod attr;
mod config;
mod connect;
mod cq;
mod daemon;
mod device;
mod error;
mod migrate;
mod mr;
mod mw;
mod ops;
mod pd;
mod qp;
mod register;
mod ssq;
mod stats;
mod stream;
mod types;

pub use attr::DeviceAttr;
pub use config::DeviceConfig;
pub use connect::{Connected, Incoming, Listener};
pub use cq::{Cq, CqError, Srq, Wc};
pub use daemon::DaemonError;
pub use device::{Device, DeviceStats};
pub use error::{DaemonWhy, MemError, WcError};
pub use ipc::qpseg::PushCounters;
pub use migrate::{MigrateError, Migrated};
pub use mr::Mr;
pub use mw::Mw;
pub use pd::Pd;
pub use qp::{Qp, QpConfig};
pub use shm::{Region, View, ViewMut};
pub use ssq::{SharedSendQueue, SsqCompletion};
pub use stats::{OPCODE_NAMES, PUSH_DISCARD_REASONS, QpStats};
pub use stream::{RING_LEN, RdmaListener, RdmaStream};
pub use types::{MwType, PdId};

pub use mpa::{ConnectError, Extensions, Framing, NoFrame, PeerEnd, Refused, RtrFlags};
pub use rdmap::{
    Access, Completion, FastReg, Payload, PostError, QpEnd, QpNum, QpState, RecvWr, RemoteBuf,
    SGL_INLINE, STag, SendFlags, SendOp, SendWr, Sge, Sgl, StreamStats, TermCode, WcOpcode,
    WcStatus, WrId,
};

/// The `bytes` crate, re-exported so applications need no direct dependency for
/// [`Bytes`](bytes::Bytes).
pub use bytes;

#[cfg(test)]
mod tests {
    use super::*;

    fn handle<T: Clone + Send + Sync + std::fmt::Debug + 'static>() {}

    #[test]
    fn handles_are_cheap_clone_send_sync_without_lifetimes() {
        handle::<Device>();
        handle::<Pd>();
        handle::<Mr>();
        handle::<Mw>();
        handle::<Cq>();
        handle::<Srq>();
        handle::<Qp>();
        handle::<Listener>();
        handle::<DeviceConfig>();
        handle::<QpConfig>();
        fn send<T: Send + 'static>() {}
        send::<Incoming>();
        send::<Connected>();
        send::<WcError>();
        send::<MemError>();
    }
}
