//! `split`: seed 002's split-model driver messaging, the **push-push** protocol, over
//! verbs. Each side is both a "host module" and an "I/O unit module": it owns receive
//! pools the other side writes into, and writes into the other side's pools.
//!
//! The protocol, as this program runs it on one queue pair per connection:
//!
//! 1. **Advertise.** Each side registers fixed-size buffer pools ([`driver::POOLS`]) and
//!    sends BufferRecvPool: per pool its reference, STag, base tagged offset, element
//!    count and element size ([`wire::PoolAdvert`]).
//! 2. **Push.** Nobody ever reads: to move a message the sender RDMA-Writes it into the
//!    next free element of the peer's pool, then *indicates* it: 32-bit immediate data
//!    `pool:8 | element:8 | length:16` in an RFC 7306 Immediate Data message, or a
//!    BufferRDMAIndicate Send when the pool is too large for those fields
//!    ([`indicate`]).
//! 3. **Credits.** Pool elements are write credits; receive buffers are message credits
//!    ([`credit`]). The owner returns elements with BufferRecvPoolUpdate and receive
//!    credits in every message header.
//! 4. **Flush.** Halfway through, each side flushes one of its pools
//!    (BufferPoolFlushRequest with a 64-bit transaction context); the peer stops writing
//!    there and replies echoing the context; only then does the owner deregister the
//!    memory ([`session`]).
//! 5. **End.** Done (counts, checked by the receiver) then Bye each way.
//!
//! Every control message carries a function code, protocol version and transaction
//! context ([`wire`]); a request of another version gets an error reply.

pub mod credit;
pub mod driver;
pub mod indicate;
pub mod session;
pub mod traffic;
pub mod wire;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::time::Duration;

use verbs::{Device, DeviceConfig, Listener};

pub use driver::Side;
pub use session::Stats;

use crate::{Error, step};

/// The default port of `split --serve`.
pub const DEFAULT_PORT: u16 = 7475;

/// The stream seeds: the accepting side pushes stream 1, the connecting side stream 2.
const SERVER_SEED: u64 = 1;
const CLIENT_SEED: u64 = 2;

/// How long connection setup may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Accepts one connection on `listener` and runs the accepting side, pushing `messages`.
pub async fn serve(listener: &Listener, device: &Device, messages: u64) -> Result<Stats, Error> {
    let pd = device.alloc_pd()?;
    let side = Side::new(&pd, messages, SERVER_SEED, CLIENT_SEED)?;
    let incoming = listener.accept().await?;
    let qp = incoming.accept(&pd, side.qp_config(), b"").await?;
    side.run(&qp).await
}

/// Connects to `addr` and runs the connecting side, pushing `messages`.
pub async fn connect(device: &Device, addr: SocketAddr, messages: u64) -> Result<Stats, Error> {
    let pd = device.alloc_pd()?;
    let side = Side::new(&pd, messages, CLIENT_SEED, SERVER_SEED)?;
    let connecting = device.connect(&pd, addr, side.qp_config(), b"");
    let conn = step(
        CONNECT_TIMEOUT,
        &format!("a connection to {addr}"),
        connecting,
    )
    .await??;
    side.run(&conn.qp).await
}

/// Both sides in this process, two devices of `cfg` over 127.0.0.1, each pushing
/// `messages`. Returns the accepting side's and the connecting side's counters.
pub async fn loopback(cfg: &DeviceConfig, messages: u64) -> Result<(Stats, Stats), Error> {
    let (a, b) = (Device::open(cfg.clone())?, Device::open(cfg.clone())?);
    let listener = a.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let stats = tokio::try_join!(serve(&listener, &a, messages), connect(&b, addr, messages))?;
    a.shutdown().await;
    b.shutdown().await;
    Ok(stats)
}

/// Prints the counters of one side.
pub fn print_summary(who: &str, s: &Stats) {
    crate::outln!(
        "{who}: pushed {} ({} octets; {} indicated by immediate data, {} by \
         BufferRDMAIndicate), received and verified {} ({} octets)",
        crate::words::count(s.sent, "message", "messages"),
        s.bytes_sent,
        s.idata,
        s.indicate_msgs,
        s.received,
        s.bytes_received
    );
    crate::outln!(
        "{who}: stalls: {} waiting for pool elements, {} for receive credits; {} \
         update/credit messages; {} writes into the flushed pool before its FlushReply",
        s.element_stalls,
        s.credit_stalls,
        s.credit_msgs,
        s.writes_before_flush_reply
    );
}
