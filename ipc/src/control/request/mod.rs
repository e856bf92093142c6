//! Requests from a client: what each asks, its function code, and its body on the wire:
//! fixed little-endian fields after the header, in the order [`Request::encode`] writes
//! them, with an address as family, port and 16 octets and a blob (private data) as a u16
//! length and its octets.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use rdmap::RecvWr;

use super::header::{finish, start};
use super::{MAX_INITIAL_RECVS, MAX_PRIVATE_DATA, QpChange, QueueDepths, func};
use crate::codec::{Malformed, Reader, put_addr, put_blob};
use crate::wqe::{RQE_SIZE, decode_rqe, encode_rqe};

/// A registration's base: zero-based, or the tagged offset of its first octet.
pub const BASE_ZERO: u8 = 0;
/// Virtual-address based.
pub const BASE_VA: u8 = 1;

/// A request from a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Opens the device; `pid` names the client in the daemon's logs.
    Open {
        /// The client's process id.
        pid: u32,
    },
    /// Allocates a protection domain.
    AllocPd,
    /// Deallocates one.
    DeallocPd {
        /// The domain.
        pd: u32,
    },
    /// Registers `len` octets of the attached memory file, from its octet `offset`.
    RegMr {
        /// The domain.
        pd: u32,
        /// Access rights (`rdmap::Access` bits).
        access: u32,
        /// `Some(va)` for a virtual-address-based region.
        va: Option<u64>,
        /// Length in octets.
        len: u64,
        /// Where in the memory file the region starts (the C library registers a
        /// program's buffer in place: its address in the process's arena file).
        offset: u64,
    },
    /// Reserves an STag for [`RegMrAt`](Self::RegMrAt); the reply is its
    /// [`Reply::Id`](super::Reply::Id).
    ReserveStag,
    /// Registers a region under a reserved STag, as [`RegMr`](Self::RegMr) does.
    RegMrAt {
        /// The reserved STag.
        stag: u32,
        /// The domain.
        pd: u32,
        /// Access rights (`rdmap::Access` bits).
        access: u32,
        /// `Some(va)` for a virtual-address-based region.
        va: Option<u64>,
        /// Length in octets.
        len: u64,
        /// Where in the memory file the region starts (the C library registers a
        /// program's buffer in place: its address in the process's arena file).
        offset: u64,
    },
    /// Deregisters a region.
    DeregMr {
        /// Its STag.
        stag: u32,
    },
    /// Listens on `addr`.
    Listen {
        /// Where.
        addr: SocketAddr,
    },
    /// Closes a listener.
    CloseListener {
        /// The listener.
        id: u32,
    },
    /// Connects a queue pair of `pd` to `addr`.
    Connect {
        /// The domain.
        pd: u32,
        /// The shared receive queue it draws on (0: none).
        srq: u32,
        /// Its send and receive queue depths.
        depths: QueueDepths,
        /// The peer.
        addr: SocketAddr,
        /// MPA private data.
        private: Bytes,
        /// Receives posted before the connection carries data.
        recvs: Vec<RecvWr>,
        /// Peer-to-peer MPA (RFC 6581) for this connection: the ready-to-receive types
        /// (`mpa::RtrFlags` bits: Send 1, Write 2, Read 4) to offer as the initiator, so
        /// the peer may send first; 0 leaves it to the daemon's own setting.
        rtr: u8,
    },
    /// Accepts a connection request into a queue pair of `pd`.
    Accept {
        /// The request (from [`Event::Incoming`](super::Event::Incoming)).
        incoming: u32,
        /// The domain.
        pd: u32,
        /// The shared receive queue it draws on (0: none).
        srq: u32,
        /// Its send and receive queue depths.
        depths: QueueDepths,
        /// MPA private data.
        private: Bytes,
        /// Receives posted before the connection carries data.
        recvs: Vec<RecvWr>,
    },
    /// Rejects a connection request.
    Reject {
        /// The request.
        incoming: u32,
        /// MPA private data.
        private: Bytes,
    },
    /// Starts a graceful close.
    Disconnect {
        /// The queue pair.
        qp: u32,
    },
    /// Destroys a queue pair (flushing its work).
    DestroyQp {
        /// The queue pair.
        qp: u32,
    },
    /// A queue pair's counters.
    QueryQp {
        /// The queue pair.
        qp: u32,
    },
    /// Changes one setting of a queue pair.
    ModifyQp {
        /// The queue pair.
        qp: u32,
        /// What changes.
        change: QpChange,
    },
    /// The device's counters.
    Stats,
    /// The device's limits and settings.
    QueryDevice,
    /// The counters of the daemon's services other than the local applications'.
    ServiceStats,
    /// The daemon's queue pairs numbered above `after`, a page of them.
    ListQps {
        /// The last number of the page before (0 for the first page).
        after: u32,
    },
    /// Shares a queue pair's socket with its client (the push path that skips the
    /// daemon): the reply carries the socket.
    ShareTx {
        /// The queue pair.
        qp: u32,
    },
    /// Creates a shared receive queue of at least `depth` entries.
    CreateSrq {
        /// Entries wanted (the daemon rounds up to a power of two).
        depth: u32,
    },
    /// Destroys a shared receive queue: queue pairs created with it keep drawing on it
    /// until they end.
    DestroySrq {
        /// The queue.
        srq: u32,
    },
    /// Allocates an unbound memory window of `pd`.
    AllocMw {
        /// The domain.
        pd: u32,
        /// 1 or 2.
        kind: u8,
    },
    /// Deallocates a window.
    DeallocMw {
        /// Its STag.
        stag: u32,
    },
    /// Binds type 1 window `mw` to `[to, to + len)` of region `mr` with `access`.
    BindMw {
        /// The window's STag.
        mw: u32,
        /// The region's STag.
        mr: u32,
        /// First tagged offset, in the region's.
        to: u64,
        /// Octets.
        len: u64,
        /// Rights (the `Access` bits).
        access: u32,
        /// One-touch (seed 001): the window serves one inbound RDMA Write message.
        one_touch: bool,
    },
    /// Invalidates a window or a fast-registration region.
    Invalidate {
        /// Its STag.
        stag: u32,
    },
    /// Allocates a region of `len` octets for fast registration, over the memory file
    /// attached.
    AllocFastRegMr {
        /// The domain.
        pd: u32,
        /// Octets.
        len: u64,
    },
}

impl Request {
    /// Its function code.
    pub fn func(&self) -> u16 {
        match self {
            Self::Open { .. } => func::OPEN,
            Self::AllocPd => func::ALLOC_PD,
            Self::DeallocPd { .. } => func::DEALLOC_PD,
            Self::RegMr { .. } => func::REG_MR,
            Self::DeregMr { .. } => func::DEREG_MR,
            Self::Listen { .. } => func::LISTEN,
            Self::CloseListener { .. } => func::CLOSE_LISTENER,
            Self::Connect { .. } => func::CONNECT,
            Self::Accept { .. } => func::ACCEPT,
            Self::Reject { .. } => func::REJECT,
            Self::Disconnect { .. } => func::DISCONNECT,
            Self::DestroyQp { .. } => func::DESTROY_QP,
            Self::QueryQp { .. } => func::QUERY_QP,
            Self::ModifyQp { .. } => func::MODIFY_QP,
            Self::Stats => func::STATS,
            Self::QueryDevice => func::QUERY_DEVICE,
            Self::ServiceStats => func::SERVICE_STATS,
            Self::ListQps { .. } => func::LIST_QPS,
            Self::ShareTx { .. } => func::SHARE_TX,
            Self::CreateSrq { .. } => func::CREATE_SRQ,
            Self::DestroySrq { .. } => func::DESTROY_SRQ,
            Self::AllocMw { .. } => func::ALLOC_MW,
            Self::DeallocMw { .. } => func::DEALLOC_MW,
            Self::BindMw { .. } => func::BIND_MW,
            Self::Invalidate { .. } => func::INVALIDATE,
            Self::AllocFastRegMr { .. } => func::ALLOC_FAST_REG_MR,
            Self::ReserveStag => func::RESERVE_STAG,
            Self::RegMrAt { .. } => func::REG_MR_AT,
        }
    }

    /// The whole message.
    pub fn encode(&self, txn: u64) -> Bytes {
        let mut out = start(self.func(), txn);
        match self {
            Self::Open { pid } => out.put_u32_le(*pid),
            Self::AllocPd
            | Self::Stats
            | Self::ReserveStag
            | Self::QueryDevice
            | Self::ServiceStats => {}
            Self::DeallocPd { pd } => out.put_u32_le(*pd),
            Self::RegMr {
                pd,
                access,
                va,
                len,
                offset,
            } => put_region(&mut out, *pd, *access, *va, (*len, *offset)),
            Self::RegMrAt {
                stag,
                pd,
                access,
                va,
                len,
                offset,
            } => {
                out.put_u32_le(*stag);
                put_region(&mut out, *pd, *access, *va, (*len, *offset));
            }
            Self::DeregMr { stag } => out.put_u32_le(*stag),
            Self::Listen { addr } => put_addr(&mut out, *addr),
            Self::CloseListener { id: n }
            | Self::Disconnect { qp: n }
            | Self::DestroyQp { qp: n }
            | Self::QueryQp { qp: n }
            | Self::CreateSrq { depth: n }
            | Self::DestroySrq { srq: n }
            | Self::DeallocMw { stag: n }
            | Self::Invalidate { stag: n }
            | Self::ListQps { after: n }
            | Self::ShareTx { qp: n } => out.put_u32_le(*n),
            Self::AllocMw { pd, kind } => {
                out.put_u32_le(*pd);
                out.put_u8(*kind);
            }
            Self::ModifyQp { qp, change } => {
                out.put_u32_le(*qp);
                let (what, value) = change.encode();
                out.put_u8(what);
                out.put_u8(value);
            }
            Self::BindMw {
                mw,
                mr,
                to,
                len,
                access,
                one_touch,
            } => {
                out.put_u32_le(*mw);
                out.put_u32_le(*mr);
                out.put_u64_le(*to);
                out.put_u64_le(*len);
                out.put_u32_le(*access);
                out.put_u8(u8::from(*one_touch));
            }
            Self::AllocFastRegMr { pd, len } => {
                out.put_u32_le(*pd);
                out.put_u64_le(*len);
            }
            Self::Connect {
                pd,
                srq,
                depths,
                addr,
                private,
                recvs,
                rtr,
            } => {
                out.put_u32_le(*pd);
                out.put_u32_le(*srq);
                depths.put(&mut out);
                put_addr(&mut out, *addr);
                put_blob(&mut out, private);
                put_recvs(&mut out, recvs);
                out.put_u8(*rtr);
            }
            Self::Accept {
                incoming,
                pd,
                srq,
                depths,
                private,
                recvs,
            } => {
                out.put_u32_le(*incoming);
                out.put_u32_le(*pd);
                out.put_u32_le(*srq);
                depths.put(&mut out);
                put_blob(&mut out, private);
                put_recvs(&mut out, recvs);
            }
            Self::Reject { incoming, private } => {
                out.put_u32_le(*incoming);
                put_blob(&mut out, private);
            }
        }
        finish(out)
    }

    /// Parses a request's body (after the header).
    pub fn decode(func: u16, body: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader::new(body);
        let req = match func {
            func::OPEN => Self::Open { pid: r.u32("pid")? },
            func::ALLOC_PD => Self::AllocPd,
            func::STATS => Self::Stats,
            func::QUERY_DEVICE => Self::QueryDevice,
            func::SERVICE_STATS => Self::ServiceStats,
            func::LIST_QPS => Self::ListQps {
                after: r.u32("after")?,
            },
            func::DEALLOC_PD => Self::DeallocPd { pd: r.u32("pd")? },
            func::REG_MR => {
                let (pd, access, va, (len, offset)) = read_region(&mut r)?;
                Self::RegMr {
                    pd,
                    access,
                    va,
                    len,
                    offset,
                }
            }
            func::RESERVE_STAG => Self::ReserveStag,
            func::REG_MR_AT => {
                let stag = r.u32("stag")?;
                let (pd, access, va, (len, offset)) = read_region(&mut r)?;
                Self::RegMrAt {
                    stag,
                    pd,
                    access,
                    va,
                    len,
                    offset,
                }
            }
            func::DEREG_MR => Self::DeregMr {
                stag: r.u32("stag")?,
            },
            func::LISTEN => Self::Listen { addr: r.addr()? },
            func::CLOSE_LISTENER => Self::CloseListener { id: r.u32("id")? },
            func::DISCONNECT => Self::Disconnect { qp: r.u32("qp")? },
            func::SHARE_TX => Self::ShareTx { qp: r.u32("qp")? },
            func::DESTROY_QP => Self::DestroyQp { qp: r.u32("qp")? },
            func::QUERY_QP => Self::QueryQp { qp: r.u32("qp")? },
            func::MODIFY_QP => Self::ModifyQp {
                qp: r.u32("qp")?,
                change: QpChange::decode(r.u8("setting")?, r.u8("value")?)?,
            },
            func::CREATE_SRQ => Self::CreateSrq {
                depth: r.u32("depth")?,
            },
            func::DESTROY_SRQ => Self::DestroySrq { srq: r.u32("srq")? },
            func::ALLOC_MW => Self::AllocMw {
                pd: r.u32("pd")?,
                kind: match r.u8("window type")? {
                    k @ (1 | 2) => k,
                    _ => return Err(Malformed("window type")),
                },
            },
            func::DEALLOC_MW => Self::DeallocMw {
                stag: r.u32("stag")?,
            },
            func::BIND_MW => Self::BindMw {
                mw: r.u32("mw")?,
                mr: r.u32("mr")?,
                to: r.u64("to")?,
                len: r.u64("len")?,
                access: r.u32("access")?,
                one_touch: match r.u8("one-touch")? {
                    0 => false,
                    1 => true,
                    _ => return Err(Malformed("one-touch")),
                },
            },
            func::INVALIDATE => Self::Invalidate {
                stag: r.u32("stag")?,
            },
            func::ALLOC_FAST_REG_MR => Self::AllocFastRegMr {
                pd: r.u32("pd")?,
                len: r.u64("len")?,
            },
            func::CONNECT => Self::Connect {
                pd: r.u32("pd")?,
                srq: r.u32("srq")?,
                depths: QueueDepths::read(&mut r)?,
                addr: r.addr()?,
                private: r.blob(MAX_PRIVATE_DATA, "private data")?,
                recvs: read_recvs(&mut r)?,
                rtr: r.u8("rtr")?,
            },
            func::ACCEPT => Self::Accept {
                incoming: r.u32("incoming")?,
                pd: r.u32("pd")?,
                srq: r.u32("srq")?,
                depths: QueueDepths::read(&mut r)?,
                private: r.blob(MAX_PRIVATE_DATA, "private data")?,
                recvs: read_recvs(&mut r)?,
            },
            func::REJECT => Self::Reject {
                incoming: r.u32("incoming")?,
                private: r.blob(MAX_PRIVATE_DATA, "private data")?,
            },
            _ => return Err(Malformed("function code")),
        };
        if !r.is_empty() {
            return Err(Malformed("octets after the last field"));
        }
        Ok(req)
    }
}

/// Initial receives: a u16 count, then receive queue entries (at most
/// [`MAX_INITIAL_RECVS`]; a request built with more is cut there and the receiver's
/// decode would refuse it).
fn put_recvs(out: &mut BytesMut, recvs: &[RecvWr]) {
    let n = recvs.len().min(MAX_INITIAL_RECVS);
    out.put_u16_le(n as u16);
    for wr in &recvs[..n] {
        // An entry with too many scatter entries goes as an empty one, which the daemon
        // posts as a zero-length buffer; the library checks before it sends.
        out.put_slice(&encode_rqe(wr).unwrap_or([0; RQE_SIZE]));
    }
}

fn read_recvs(r: &mut Reader<'_>) -> Result<Vec<RecvWr>, Malformed> {
    let n = usize::from(r.u16("receive count")?);
    if n > MAX_INITIAL_RECVS {
        return Err(Malformed("receive count"));
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let mut e = [0u8; RQE_SIZE];
        e.copy_from_slice(r.take(RQE_SIZE, "receive entry")?);
        v.push(decode_rqe(&e)?);
    }
    Ok(v)
}

/// A region's domain, rights, addressing and length, as [`Request::RegMr`] and
/// [`Request::RegMrAt`] carry them.
fn put_region(
    out: &mut BytesMut,
    pd: u32,
    access: u32,
    va: Option<u64>,
    (len, offset): (u64, u64),
) {
    out.put_u32_le(pd);
    out.put_u32_le(access);
    out.put_u8(if va.is_some() { BASE_VA } else { BASE_ZERO });
    out.put_u64_le(va.unwrap_or(0));
    out.put_u64_le(len);
    out.put_u64_le(offset);
}

/// The region's placement in its file: `(len, offset)`.
type Placement = (u64, u64);

/// What [`put_region`] wrote: `(pd, access, va, (len, offset))`.
fn read_region(r: &mut Reader<'_>) -> Result<(u32, u32, Option<u64>, Placement), Malformed> {
    let pd = r.u32("pd")?;
    let access = r.u32("access")?;
    let base = r.u8("base")?;
    let va = r.u64("va")?;
    let len = r.u64("len")?;
    let offset = r.u64("offset")?;
    let va = match base {
        BASE_ZERO => None,
        BASE_VA => Some(va),
        _ => return Err(Malformed("base")),
    };
    Ok((pd, access, va, (len, offset)))
}

/// Memory files a request with function code `func` carries.
pub fn request_fds(func: u16) -> usize {
    usize::from(func == func::REG_MR || func == func::ALLOC_FAST_REG_MR || func == func::REG_MR_AT)
}

#[cfg(test)]
mod tests;
