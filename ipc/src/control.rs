//! The control channel (seed 002's channel 0): requests from a client, one reply each, and
//! events the daemon sends on its own, over a Unix stream socket.
//!
//! Every message starts with the same 16-octet header, little-endian:
//!
//! ```text
//! 0   u32  length of the whole message, header included (16 ..= MAX_MESSAGE)
//! 4   u16  function code: a request's; a reply's is the request's | 0x8000; events 0x40xx
//! 6   u16  protocol version (VERSION)
//! 8   u64  transaction context: chosen by the client, echoed in the reply; 0 in events
//! ```
//!
//! A reply's body starts with a u16 status: 0, then the result; or an error code, then a
//! length-prefixed UTF-8 text that names the cause and the fix. Memory files travel as
//! `SCM_RIGHTS` with the message that names them: one with [`Request::RegMr`], three with
//! a queue pair reply (its segment, then the two doorbells), one with a protection
//! domain's reply (its push region) and one with a shared receive queue's (its ring).
//!
//! A fixed little-endian layout (not a serialization crate): the messages are few and
//! small, the format is the ABI between two builds that may differ, and every field is
//! tested against literal octets here.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};

use rdmap::RecvWr;

use crate::codec::{Malformed, Reader, put_addr, put_blob};
use crate::wqe::{RQE_SIZE, decode_rqe, encode_rqe};

mod listing;

pub use listing::{
    LOCAL_SERVICE, MAX_QPS_PER_PAGE, MAX_SERVICE_NAME, QpListing, QpPage, QpStateCode,
    ServiceCounters,
};

/// The protocol version this build speaks.
pub const VERSION: u16 = 7;
/// Octets of the header.
pub const HEADER_LEN: usize = 16;
/// The longest message either side accepts.
pub const MAX_MESSAGE: usize = 64 << 10;
/// Receives a connect or accept request may post before the connection carries data.
pub const MAX_INITIAL_RECVS: usize = 128;
/// Private data carried by connect, accept and reject (the MPA limit).
pub const MAX_PRIVATE_DATA: usize = 512;

/// Function codes.
pub mod func {
    /// Open the device: the first request.
    pub const OPEN: u16 = 0x0001;
    /// Allocate a protection domain.
    pub const ALLOC_PD: u16 = 0x0002;
    /// Deallocate a protection domain.
    pub const DEALLOC_PD: u16 = 0x0003;
    /// Register a memory region (one memory file attached).
    pub const REG_MR: u16 = 0x0004;
    /// Deregister a memory region: the reply means the daemon no longer touches it.
    pub const DEREG_MR: u16 = 0x0005;
    /// Listen for connections.
    pub const LISTEN: u16 = 0x0006;
    /// Stop listening.
    pub const CLOSE_LISTENER: u16 = 0x0007;
    /// Connect a queue pair.
    pub const CONNECT: u16 = 0x0008;
    /// Accept a connection request.
    pub const ACCEPT: u16 = 0x0009;
    /// Reject a connection request.
    pub const REJECT: u16 = 0x000a;
    /// Start a graceful close.
    pub const DISCONNECT: u16 = 0x000b;
    /// Destroy a queue pair: the reply means its work is flushed and its rings unused.
    pub const DESTROY_QP: u16 = 0x000c;
    /// A queue pair's state and counters.
    pub const QUERY_QP: u16 = 0x000d;
    /// The device's counters.
    pub const STATS: u16 = 0x000e;
    /// Create a shared receive queue (its ring's memory file comes with the reply).
    pub const CREATE_SRQ: u16 = 0x000f;
    /// Destroy a shared receive queue.
    pub const DESTROY_SRQ: u16 = 0x0010;
    /// Allocate a memory window.
    pub const ALLOC_MW: u16 = 0x0011;
    /// Deallocate a memory window.
    pub const DEALLOC_MW: u16 = 0x0012;
    /// Bind a type 1 memory window.
    pub const BIND_MW: u16 = 0x0013;
    /// Invalidate a window or a fast-registration region.
    pub const INVALIDATE: u16 = 0x0014;
    /// Allocate a region for fast registration (one memory file attached).
    pub const ALLOC_FAST_REG_MR: u16 = 0x0015;
    /// Change one setting of a queue pair ([`QpChange`](super::QpChange)).
    pub const MODIFY_QP: u16 = 0x0016;
    /// Reserve an STag for a queued registration: it names a pending region until
    /// [`REG_MR_AT`] registers memory under it (seed 003's pipelined registration).
    pub const RESERVE_STAG: u16 = 0x0017;
    /// Register a memory region under a reserved STag (one memory file attached). The
    /// client does not wait for the reply before naming the STag in work requests.
    pub const REG_MR_AT: u16 = 0x0018;
    /// The device's limits and settings (what `ibv_query_device` answers).
    pub const QUERY_DEVICE: u16 = 0x0019;
    /// The counters of the daemon's other services (its built-in remote-memory target).
    pub const SERVICE_STATS: u16 = 0x001a;
    /// A page of every queue pair the daemon holds, whoever's (`iwarpd stat --qps`).
    pub const LIST_QPS: u16 = 0x001b;
    /// Set in a reply's function code.
    pub const REPLY: u16 = 0x8000;
    /// Event: a connection request arrived on a listener.
    pub const EVENT_INCOMING: u16 = 0x4001;
    /// Event: a queue pair ended.
    pub const EVENT_QP_ENDED: u16 = 0x4002;

    /// A request's name, for messages (its constant's name).
    pub fn name(func: u16) -> &'static str {
        match func & !REPLY {
            OPEN => "OPEN",
            ALLOC_PD => "ALLOC_PD",
            DEALLOC_PD => "DEALLOC_PD",
            REG_MR => "REG_MR",
            DEREG_MR => "DEREG_MR",
            LISTEN => "LISTEN",
            CLOSE_LISTENER => "CLOSE_LISTENER",
            CONNECT => "CONNECT",
            ACCEPT => "ACCEPT",
            REJECT => "REJECT",
            DISCONNECT => "DISCONNECT",
            DESTROY_QP => "DESTROY_QP",
            QUERY_QP => "QUERY_QP",
            STATS => "STATS",
            CREATE_SRQ => "CREATE_SRQ",
            DESTROY_SRQ => "DESTROY_SRQ",
            ALLOC_MW => "ALLOC_MW",
            DEALLOC_MW => "DEALLOC_MW",
            BIND_MW => "BIND_MW",
            INVALIDATE => "INVALIDATE",
            ALLOC_FAST_REG_MR => "ALLOC_FAST_REG_MR",
            MODIFY_QP => "MODIFY_QP",
            RESERVE_STAG => "RESERVE_STAG",
            REG_MR_AT => "REG_MR_AT",
            QUERY_DEVICE => "QUERY_DEVICE",
            EVENT_INCOMING => "EVENT_INCOMING",
            EVENT_QP_ENDED => "EVENT_QP_ENDED",
            _ => "an unknown request",
        }
    }
}

/// The header every message starts with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Length of the whole message.
    pub len: u32,
    /// Function code.
    pub func: u16,
    /// Protocol version.
    pub version: u16,
    /// Transaction context.
    pub txn: u64,
}

impl Header {
    /// Parses the first [`HEADER_LEN`] octets of `buf` (`None` if fewer are there). The
    /// length is checked against the limits; the version is the caller's to check.
    pub fn parse(buf: &[u8]) -> Option<Result<Self, Malformed>> {
        let mut r = Reader::new(buf.get(..HEADER_LEN)?);
        let h = Self {
            len: r.u32("length").ok()?,
            func: r.u16("function").ok()?,
            version: r.u16("version").ok()?,
            txn: r.u64("transaction").ok()?,
        };
        let len = h.len as usize;
        Some(if (HEADER_LEN..=MAX_MESSAGE).contains(&len) {
            Ok(h)
        } else {
            Err(Malformed("message length"))
        })
    }
}

fn start(func: u16, txn: u64) -> BytesMut {
    let mut out = BytesMut::with_capacity(64);
    out.put_u32_le(0);
    out.put_u16_le(func);
    out.put_u16_le(VERSION);
    out.put_u64_le(txn);
    out
}

fn finish(mut out: BytesMut) -> Bytes {
    let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out.freeze()
}

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
    /// Registers the attached memory file's first `len` octets.
    RegMr {
        /// The domain.
        pd: u32,
        /// Access rights (`rdmap::Access` bits).
        access: u32,
        /// `Some(va)` for a virtual-address-based region.
        va: Option<u64>,
        /// Length in octets.
        len: u64,
    },
    /// Reserves an STag for [`RegMrAt`](Self::RegMrAt); the reply is its
    /// [`Reply::Id`].
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
    },
    /// Accepts a connection request into a queue pair of `pd`.
    Accept {
        /// The request (from [`Event::Incoming`]).
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
            } => put_region(&mut out, *pd, *access, *va, *len),
            Self::RegMrAt {
                stag,
                pd,
                access,
                va,
                len,
            } => {
                out.put_u32_le(*stag);
                put_region(&mut out, *pd, *access, *va, *len);
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
            | Self::ListQps { after: n } => out.put_u32_le(*n),
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
            } => {
                out.put_u32_le(*pd);
                out.put_u32_le(*srq);
                depths.put(&mut out);
                put_addr(&mut out, *addr);
                put_blob(&mut out, private);
                put_recvs(&mut out, recvs);
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
                let (pd, access, va, len) = read_region(&mut r)?;
                Self::RegMr {
                    pd,
                    access,
                    va,
                    len,
                }
            }
            func::RESERVE_STAG => Self::ReserveStag,
            func::REG_MR_AT => {
                let stag = r.u32("stag")?;
                let (pd, access, va, len) = read_region(&mut r)?;
                Self::RegMrAt {
                    stag,
                    pd,
                    access,
                    va,
                    len,
                }
            }
            func::DEREG_MR => Self::DeregMr {
                stag: r.u32("stag")?,
            },
            func::LISTEN => Self::Listen { addr: r.addr()? },
            func::CLOSE_LISTENER => Self::CloseListener { id: r.u32("id")? },
            func::DISCONNECT => Self::Disconnect { qp: r.u32("qp")? },
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

/// The depths a queue pair's client asks for: the daemon makes its rings at least this
/// deep (a power of two) and refuses more than [`DeviceAttrs`] allows. On the wire two
/// u32, the send queue's first.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send requests outstanding at once.
    pub sq: u32,
    /// Receives outstanding at once.
    pub rq: u32,
}

impl QueueDepths {
    fn put(&self, out: &mut BytesMut) {
        out.put_u32_le(self.sq);
        out.put_u32_le(self.rq);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(Self {
            sq: r.u32("send queue depth")?,
            rq: r.u32("receive queue depth")?,
        })
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
fn put_region(out: &mut BytesMut, pd: u32, access: u32, va: Option<u64>, len: u64) {
    out.put_u32_le(pd);
    out.put_u32_le(access);
    out.put_u8(if va.is_some() { BASE_VA } else { BASE_ZERO });
    out.put_u64_le(va.unwrap_or(0));
    out.put_u64_le(len);
}

/// What [`put_region`] wrote: `(pd, access, va, len)`.
fn read_region(r: &mut Reader<'_>) -> Result<(u32, u32, Option<u64>, u64), Malformed> {
    let pd = r.u32("pd")?;
    let access = r.u32("access")?;
    let base = r.u8("base")?;
    let va = r.u64("va")?;
    let len = r.u64("len")?;
    let va = match base {
        BASE_ZERO => None,
        BASE_VA => Some(va),
        _ => return Err(Malformed("base")),
    };
    Ok((pd, access, va, len))
}

/// Memory files a request with function code `func` carries.
pub fn request_fds(func: u16) -> usize {
    usize::from(func == func::REG_MR || func == func::ALLOC_FAST_REG_MR || func == func::REG_MR_AT)
}

/// Memory files the reply to function `func` (or an event) carries, judged from its
/// header: a successful queue pair reply carries three.
pub fn reply_fds(func: u16, body: &[u8]) -> usize {
    let ok = body.get(..2) == Some(&[0, 0]);
    let f = func & !func::REPLY;
    match f {
        _ if func & func::REPLY == 0 || !ok => 0,
        func::CONNECT | func::ACCEPT => 3,
        func::ALLOC_PD | func::CREATE_SRQ => 1,
        _ => 0,
    }
}

/// One setting of a queue pair that [`Request::ModifyQp`] changes. On the wire: a setting
/// octet and a value octet (`1 v` incoming RDMA served, `2 v` drain on local failure,
/// `3 0` resume the send queue; `v` is 0 or 1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum QpChange {
    /// Serve (`true`) or refuse the peer's RDMA (seed 004).
    IncomingRdma(bool),
    /// A local failure drains the send queue (`true`) or ends the connection (seed 001).
    DrainOnLocalFailure(bool),
    /// Leave the drained send queue state.
    ResumeSendQueue,
}

impl QpChange {
    fn encode(self) -> (u8, u8) {
        match self {
            Self::IncomingRdma(on) => (1, u8::from(on)),
            Self::DrainOnLocalFailure(on) => (2, u8::from(on)),
            Self::ResumeSendQueue => (3, 0),
        }
    }

    fn decode(what: u8, value: u8) -> Result<Self, Malformed> {
        let on = match value {
            0 => false,
            1 => true,
            _ => return Err(Malformed("queue pair setting value")),
        };
        match what {
            1 => Ok(Self::IncomingRdma(on)),
            2 => Ok(Self::DrainOnLocalFailure(on)),
            3 if !on => Ok(Self::ResumeSendQueue),
            _ => Err(Malformed("queue pair setting")),
        }
    }
}

/// What a connected queue pair is, sent with its segment and doorbells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The client's handle for it in later requests.
    pub qp: u32,
    /// The engine's queue pair number.
    pub num: u32,
    /// Negotiated inbound Read/Atomic limit.
    pub ird: u16,
    /// Negotiated outbound limit.
    pub ord: u16,
    /// Octets in one FPDU (DDP header and payload).
    pub mulpdu: u16,
    /// This stack's extensions both sides agreed to ([`rdmap::Extensions`] bits).
    pub extensions: u32,
    /// The peer's private data.
    pub private: Bytes,
    /// The segment's geometry.
    pub geometry: crate::qpseg::Geometry,
    /// CRC and markers in force. On the wire one octet after the private data (bit 0
    /// CRC, bit 1 markers sent, bit 2 markers received); a daemon from before it sends
    /// none, read as all off.
    pub framing: rdmap::Framing,
}

/// The counters of a queue pair, or their sum over a device: its traffic (the stream's
/// own [`StreamStats`](rdmap::StreamStats)) and seed 000's push path
/// ([`PushCounters`](crate::qpseg::PushCounters)). One struct for the engine, the control
/// protocol and the library alike. On the wire: 47 little-endian u64s, the traffic's
/// fields then the push path's, in the order of their fields (arrays element by element).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// FPDUs, octets per opcode, octets placed in place, Terminates.
    pub traffic: rdmap::StreamStats,
    /// Requests executed from pushed messages and from the send queue, and discards by
    /// reason.
    pub push: crate::qpseg::PushCounters,
}

/// The RDMAP opcodes counted: 0x0 to 0xF.
pub const OPCODES: usize = rdmap::OPCODES;

impl Counters {
    /// The counters in wire order.
    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        let (t, p) = (&self.traffic, &self.push);
        [
            t.fpdus_sent,
            t.fpdus_received,
            t.bytes_placed,
            t.bytes_sent_in_place,
            t.bytes_received_in_place,
        ]
        .into_iter()
        .chain(t.octets_sent)
        .chain(t.octets_received)
        .chain([
            t.terminates_sent,
            t.terminates_received,
            p.executed,
            p.sq_path,
        ])
        .chain(p.discards)
    }

    fn put(&self, out: &mut BytesMut) {
        for w in self.words() {
            out.put_u64_le(w);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let mut c = Self::default();
        let (t, p) = (&mut c.traffic, &mut c.push);
        for w in [
            &mut t.fpdus_sent,
            &mut t.fpdus_received,
            &mut t.bytes_placed,
            &mut t.bytes_sent_in_place,
            &mut t.bytes_received_in_place,
        ]
        .into_iter()
        .chain(t.octets_sent.iter_mut())
        .chain(t.octets_received.iter_mut())
        .chain([
            &mut t.terminates_sent,
            &mut t.terminates_received,
            &mut p.executed,
            &mut p.sq_path,
        ])
        .chain(p.discards.iter_mut())
        {
            *w = r.u64("counter")?;
        }
        Ok(c)
    }
}

/// A device's counters (the whole daemon), with the asking client's share.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Queue pairs of the asking client.
    pub queue_pairs: u32,
    /// Registered regions of the asking client.
    pub memory_entries: u32,
    /// Applications attached now.
    pub clients: u32,
    /// Queue pairs of every client now.
    pub device_queue_pairs: u32,
    /// Connections that reached FPDU mode since the daemon started.
    pub connections: u64,
    /// Of those, the ones closed and released.
    pub connections_closed: u64,
    /// Every queue pair's counters, live and gone, summed.
    pub totals: Counters,
}

/// A device's limits and settings, in the order of the reply's fields (little-endian).
/// `u32::MAX` in a limit means none but memory.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttrs {
    /// Queue pairs one application may have.
    pub max_qp: u32,
    /// Regions and windows one application may have.
    pub max_mr: u32,
    /// Shared receive queues one application may have.
    pub max_srq: u32,
    /// Send queue depth of a queue pair.
    pub sq_depth: u32,
    /// Receive queue depth of a queue pair.
    pub rq_depth: u32,
    /// Gather entries of a send request.
    pub max_send_sge: u32,
    /// Scatter entries of a receive request.
    pub max_recv_sge: u32,
    /// Inbound RDMA Reads and Atomics outstanding per queue pair (IRD) it offers.
    pub ird: u16,
    /// Outbound ones (ORD) it asks for.
    pub ord: u16,
    /// The largest ULPDU it sends.
    pub mulpdu: u16,
    /// MPA revision it offers.
    pub mpa_revision: u8,
    /// CRC on.
    pub crc: bool,
    /// Markers asked for.
    pub markers: bool,
    /// Extensions it offers (`mpa::Extensions` bits).
    pub extensions: u32,
    /// Slots of a protection domain's push region (0: no push path).
    pub push_slots: u32,
}

impl DeviceAttrs {
    fn put(&self, out: &mut BytesMut) {
        for v in [
            self.max_qp,
            self.max_mr,
            self.max_srq,
            self.sq_depth,
            self.rq_depth,
            self.max_send_sge,
            self.max_recv_sge,
        ] {
            out.put_u32_le(v);
        }
        out.put_u16_le(self.ird);
        out.put_u16_le(self.ord);
        out.put_u16_le(self.mulpdu);
        out.put_u8(self.mpa_revision);
        out.put_u8(u8::from(self.crc) | u8::from(self.markers) << 1);
        out.put_u32_le(self.extensions);
        out.put_u32_le(self.push_slots);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let mut a = Self {
            max_qp: r.u32("max_qp")?,
            max_mr: r.u32("max_mr")?,
            max_srq: r.u32("max_srq")?,
            sq_depth: r.u32("sq_depth")?,
            rq_depth: r.u32("rq_depth")?,
            max_send_sge: r.u32("max_send_sge")?,
            max_recv_sge: r.u32("max_recv_sge")?,
            ird: r.u16("ird")?,
            ord: r.u16("ord")?,
            mulpdu: r.u16("mulpdu")?,
            mpa_revision: r.u8("mpa_revision")?,
            ..Self::default()
        };
        let flags = r.u8("flags")?;
        a.crc = flags & 1 != 0;
        a.markers = flags & 2 != 0;
        a.extensions = r.u32("extensions")?;
        a.push_slots = r.u32("push_slots")?;
        Ok(a)
    }
}

/// A reply's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Done, nothing to return.
    Done,
    /// The request failed: a code and a text naming the cause and the fix.
    Error {
        /// One of [`error`].
        code: u16,
        /// For the user.
        text: String,
    },
    /// A Connect the peer rejected, with its private data. On the wire an error with
    /// code [`error::CONNECT_REJECTED`], its text, the private data (a blob), then one
    /// octet of what the peer's answer refused (bit 0: CRC; absent from daemons before
    /// it, read as nothing refused): a client that does not know the code reads the text.
    Rejected {
        /// The peer's private data.
        private_data: Bytes,
        /// What the peer's answer dropped of what the daemon asked for.
        refused: rdmap::Refused,
    },
    /// A number: the daemon's process id for Open; the STag for RegMr, AllocMw, BindMw
    /// and AllocFastRegMr.
    Id(u32),
    /// A protection domain, with its push region (one memory file attached).
    Pd {
        /// The domain.
        pd: u32,
        /// Slots of its push region.
        push_slots: u32,
    },
    /// A listener: its id and the address it bound.
    Listening {
        /// The listener.
        id: u32,
        /// Bound address.
        addr: SocketAddr,
    },
    /// A connected queue pair (three memory files attached).
    Qp(QpInfo),
    /// Queue pair counters.
    QpCounters(Counters),
    /// Device counters.
    Stats(DeviceCounters),
    /// The device's limits and settings.
    Device(DeviceAttrs),
    /// A shared receive queue (its ring's memory file attached).
    Srq {
        /// The queue.
        srq: u32,
        /// Entries its ring holds.
        depth: u32,
    },
    /// The counters of the daemon's other services.
    ServiceStats(Vec<ServiceCounters>),
    /// A page of the daemon's queue pairs.
    QpList(QpPage),
}

/// Reply error codes.
pub mod error {
    /// The request is malformed or of an unknown function.
    pub const MALFORMED: u16 = 1;
    /// The client speaks another protocol version.
    pub const VERSION: u16 = 2;
    /// An object named by the request does not exist or is not the client's.
    pub const NOT_FOUND: u16 = 3;
    /// The engine refused (the text says why).
    pub const REFUSED: u16 = 4;
    /// The connection could not be made (the text says why).
    pub const CONNECT: u16 = 5;
    /// A limit of the daemon was reached.
    pub const LIMIT: u16 = 6;
    /// The connection could not be made: nothing listens at the address (TCP refused).
    /// A client that does not know this code reads it as [`CONNECT`].
    pub const CONNECT_REFUSED: u16 = 7;
    /// The connection could not be made: no route to the host.
    pub const CONNECT_UNREACHABLE: u16 = 8;
    /// The connection could not be made: the host did not answer the TCP connect.
    pub const CONNECT_TIMED_OUT: u16 = 9;
    /// The peer rejected the connection; its private data follows the text.
    pub const CONNECT_REJECTED: u16 = 10;

    /// The code of a failed connect whose TCP part failed with `kind`.
    pub fn of_connect(kind: std::io::ErrorKind) -> u16 {
        use std::io::ErrorKind as K;
        match kind {
            K::ConnectionRefused => CONNECT_REFUSED,
            K::HostUnreachable | K::NetworkUnreachable => CONNECT_UNREACHABLE,
            K::TimedOut => CONNECT_TIMED_OUT,
            _ => CONNECT,
        }
    }

    /// The TCP failure a connect code stands for (`None`: not a TCP failure).
    pub fn connect_kind(code: u16) -> Option<std::io::ErrorKind> {
        use std::io::ErrorKind as K;
        match code {
            CONNECT_REFUSED => Some(K::ConnectionRefused),
            CONNECT_UNREACHABLE => Some(K::HostUnreachable),
            CONNECT_TIMED_OUT => Some(K::TimedOut),
            _ => None,
        }
    }
}

impl Reply {
    /// The whole message answering function `func`'s transaction `txn`.
    pub fn encode(&self, func: u16, txn: u64) -> Bytes {
        let mut out = start(func | func::REPLY, txn);
        match self {
            Self::Error { code, text } => {
                out.put_u16_le(*code);
                put_blob(&mut out, text.as_bytes());
                return finish(out);
            }
            Self::Rejected {
                private_data,
                refused,
            } => {
                out.put_u16_le(error::CONNECT_REJECTED);
                put_blob(&mut out, b"the peer rejected the connection");
                put_blob(&mut out, private_data);
                out.put_u8(u8::from(refused.crc));
                return finish(out);
            }
            _ => {}
        }
        out.put_u16_le(0);
        match self {
            Self::Done | Self::Error { .. } | Self::Rejected { .. } => {}
            Self::Id(n) => out.put_u32_le(*n),
            Self::Pd {
                pd: a,
                push_slots: b,
            }
            | Self::Srq { srq: a, depth: b } => {
                out.put_u32_le(*a);
                out.put_u32_le(*b);
            }
            Self::Listening { id, addr } => {
                out.put_u32_le(*id);
                put_addr(&mut out, *addr);
            }
            Self::Qp(q) => {
                out.put_u32_le(q.qp);
                out.put_u32_le(q.num);
                out.put_u16_le(q.ird);
                out.put_u16_le(q.ord);
                out.put_u16_le(q.mulpdu);
                out.put_u32_le(q.extensions);
                q.geometry.put(&mut out);
                put_blob(&mut out, &q.private);
                let f = q.framing;
                out.put_u8(
                    u8::from(f.crc) | u8::from(f.markers_tx) << 1 | u8::from(f.markers_rx) << 2,
                );
            }
            Self::QpCounters(c) => c.put(&mut out),
            Self::Device(a) => a.put(&mut out),
            Self::Stats(d) => d.put(&mut out),
            Self::ServiceStats(services) => listing::put_services(&mut out, services),
            Self::QpList(page) => listing::put_page(&mut out, page),
        }
        finish(out)
    }

    /// Parses the body of the reply to function `func` (the request's code).
    pub fn decode(func: u16, body: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader::new(body);
        let status = r.u16("status")?;
        if status != 0 {
            let text = r.blob(MAX_MESSAGE, "error text")?;
            if status == error::CONNECT_REJECTED {
                let private = r.blob(MAX_MESSAGE, "private data")?;
                let refused = if r.is_empty() { 0 } else { r.u8("refused")? };
                return Ok(Self::Rejected {
                    private_data: Bytes::copy_from_slice(&private),
                    refused: rdmap::Refused {
                        crc: refused & 1 != 0,
                    },
                });
            }
            return Ok(Self::Error {
                code: status,
                text: String::from_utf8_lossy(&text).into_owned(),
            });
        }
        let reply = match func {
            func::OPEN
            | func::REG_MR
            | func::ALLOC_MW
            | func::BIND_MW
            | func::ALLOC_FAST_REG_MR
            | func::RESERVE_STAG => Self::Id(r.u32("id")?),
            func::ALLOC_PD => Self::Pd {
                pd: r.u32("pd")?,
                push_slots: r.u32("push slots")?,
            },
            func::CREATE_SRQ => Self::Srq {
                srq: r.u32("srq")?,
                depth: r.u32("depth")?,
            },
            func::LISTEN => Self::Listening {
                id: r.u32("id")?,
                addr: r.addr()?,
            },
            func::CONNECT | func::ACCEPT => Self::Qp(QpInfo {
                qp: r.u32("qp")?,
                num: r.u32("num")?,
                ird: r.u16("ird")?,
                ord: r.u16("ord")?,
                mulpdu: r.u16("mulpdu")?,
                extensions: r.u32("extensions")?,
                geometry: crate::qpseg::Geometry::read(&mut r)?,
                private: r.blob(MAX_PRIVATE_DATA, "private data")?,
                framing: {
                    let bits = if r.is_empty() { 0 } else { r.u8("framing")? };
                    rdmap::Framing {
                        crc: bits & 1 != 0,
                        markers_tx: bits & 2 != 0,
                        markers_rx: bits & 4 != 0,
                    }
                },
            }),
            func::QUERY_QP => Self::QpCounters(Counters::read(&mut r)?),
            func::QUERY_DEVICE => Self::Device(DeviceAttrs::read(&mut r)?),
            func::STATS => Self::Stats(DeviceCounters::read(&mut r)?),
            func::SERVICE_STATS => Self::ServiceStats(listing::read_services(&mut r)?),
            func::LIST_QPS => Self::QpList(listing::read_page(&mut r)?),
            _ => Self::Done,
        };
        if !r.is_empty() {
            return Err(Malformed("octets after the last field"));
        }
        Ok(reply)
    }
}

/// How a queue pair ended, as [`Event::QpEnded`] carries it.
pub mod end {
    /// Closed gracefully.
    pub const CLOSED: u8 = 0;
    /// The peer sent a Terminate.
    pub const TERMINATED_BY_PEER: u8 = 1;
    /// This side sent a Terminate.
    pub const TERMINATED: u8 = 2;
    /// The connection was lost.
    pub const CONNECTION_LOST: u8 = 3;
    /// A timeout ended it.
    pub const TIMED_OUT: u8 = 4;
    /// Its completion ring overflowed: the daemon terminated it.
    pub const CQ_OVERRUN: u8 = 5;
    /// The client wrote garbage into its rings: the daemon closed it.
    pub const MISUSED: u8 = 6;
}

/// Something the daemon tells a client on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A connection request arrived on a listener.
    Incoming {
        /// The listener.
        listener: u32,
        /// The request's id for Accept or Reject.
        id: u32,
        /// Who asks.
        peer: SocketAddr,
        /// Their private data.
        private: Bytes,
    },
    /// A queue pair ended.
    QpEnded {
        /// The queue pair.
        qp: u32,
        /// How: one of [`end`].
        how: u8,
        /// The Terminate's two octets (layer/type, code), if one was involved.
        term: [u8; 2],
    },
}

impl Event {
    /// The whole message.
    pub fn encode(&self) -> Bytes {
        match self {
            Self::Incoming {
                listener,
                id,
                peer,
                private,
            } => {
                let mut out = start(func::EVENT_INCOMING, 0);
                out.put_u32_le(*listener);
                out.put_u32_le(*id);
                put_addr(&mut out, *peer);
                put_blob(&mut out, private);
                finish(out)
            }
            Self::QpEnded { qp, how, term } => {
                let mut out = start(func::EVENT_QP_ENDED, 0);
                out.put_u32_le(*qp);
                out.put_u8(*how);
                out.put_slice(term);
                finish(out)
            }
        }
    }

    /// Parses an event's body.
    pub fn decode(func: u16, body: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader::new(body);
        let ev = match func {
            func::EVENT_INCOMING => Self::Incoming {
                listener: r.u32("listener")?,
                id: r.u32("id")?,
                peer: r.addr()?,
                private: r.blob(MAX_PRIVATE_DATA, "private data")?,
            },
            func::EVENT_QP_ENDED => {
                let qp = r.u32("qp")?;
                let how = r.u8("how")?;
                let t = r.take(2, "terminate")?;
                Self::QpEnded {
                    qp,
                    how,
                    term: [t[0], t[1]],
                }
            }
            _ => return Err(Malformed("event code")),
        };
        if !r.is_empty() {
            return Err(Malformed("octets after the last field"));
        }
        Ok(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connects_tcp_failure_crosses_as_its_kind() {
        use std::io::ErrorKind as K;
        for kind in [K::ConnectionRefused, K::HostUnreachable, K::TimedOut] {
            let code = error::of_connect(kind);
            assert_ne!(code, error::CONNECT, "{kind:?}");
            assert_eq!(error::connect_kind(code), Some(kind));
        }
        assert_eq!(
            error::of_connect(K::NetworkUnreachable),
            error::CONNECT_UNREACHABLE
        );
        assert_eq!(error::of_connect(K::ConnectionReset), error::CONNECT);
        assert_eq!(error::connect_kind(error::CONNECT), None);
    }

    #[test]
    fn a_request_is_header_then_fixed_little_endian_fields() {
        let m = Request::RegMr {
            pd: 3,
            access: 0x0f,
            va: Some(0x1122_3344_5566_7788),
            len: 4096,
        }
        .encode(0xa1a2_a3a4_a5a6_a7a8);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x29, 0, 0, 0,  0x04, 0x00,  0x07, 0x00,
            0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1,
            3, 0, 0, 0,  0x0f, 0, 0, 0,  1,
            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
            0, 0x10, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(&m[..], want);
        let h = Header::parse(&m).unwrap().unwrap();
        assert_eq!(
            (h.len, h.func, h.version, h.txn),
            (41, 4, 7, 0xa1a2_a3a4_a5a6_a7a8)
        );
        Request::decode(h.func, &m[HEADER_LEN..]).unwrap();
        assert_eq!(request_fds(h.func), 1);
    }

    #[test]
    fn a_registration_at_a_reserved_stag_is_the_stag_then_the_region() {
        let m = Request::RegMrAt {
            stag: 0x0000_2a07,
            pd: 3,
            access: 0x0f,
            va: None,
            len: 4096,
        }
        .encode(1);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x2d, 0, 0, 0,  0x18, 0x00,  0x07, 0x00,
            1, 0, 0, 0, 0, 0, 0, 0,
            0x07, 0x2a, 0, 0,
            3, 0, 0, 0,  0x0f, 0, 0, 0,  0,
            0, 0, 0, 0, 0, 0, 0, 0,
            0, 0x10, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(&m[..], want);
        assert_eq!(request_fds(func::REG_MR_AT), 1);
        let r = Request::ReserveStag.encode(2);
        assert_eq!(&r[..8], &[16, 0, 0, 0, 0x17, 0x00, 0x07, 0x00]);
        assert_eq!(request_fds(func::RESERVE_STAG), 0);
        let reply = Reply::Id(0x2a07).encode(func::RESERVE_STAG, 2);
        let h = Header::parse(&reply).unwrap().unwrap();
        assert_eq!(
            Reply::decode(h.func & !func::REPLY, &reply[HEADER_LEN..]).unwrap(),
            Reply::Id(0x2a07)
        );
    }

    #[test]
    fn counters_are_47_words_in_field_order() {
        let mut c = Counters::default();
        c.traffic.fpdus_sent = 0x0102;
        c.traffic.octets_sent = std::array::from_fn(|i| i as u64);
        c.push.discards = [0, 0, 0, 0, 0, 0x55];
        let m = Reply::QpCounters(c).encode(func::QUERY_QP, 1);
        // After the status (0: success).
        let body = &m[HEADER_LEN + 2..];
        assert_eq!(body.len(), 47 * 8);
        assert_eq!(&body[..8], &[0x02, 0x01, 0, 0, 0, 0, 0, 0]);
        // octets_sent[11] is word 5 + 11.
        assert_eq!(body[16 * 8], 11);
        assert_eq!(body[46 * 8], 0x55);
        let d = Reply::Stats(DeviceCounters::default()).encode(func::STATS, 1);
        assert_eq!(d.len() - HEADER_LEN - 2, 4 * 4 + 2 * 8 + 47 * 8);
    }

    #[test]
    fn connect_carries_address_and_private_data() {
        let m = Request::Connect {
            pd: 1,
            srq: 0x0203,
            depths: QueueDepths { sq: 0x400, rq: 16 },
            addr: "10.0.0.2:4791".parse().unwrap(),
            private: Bytes::from_static(b"hi"),
            recvs: Vec::new(),
        }
        .encode(7);
        #[rustfmt::skip]
        let body: &[u8] = &[
            1, 0, 0, 0,
            3, 2, 0, 0,
            0, 4, 0, 0,
            16, 0, 0, 0,
            4, 0xb7, 0x12, 10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            2, 0, b'h', b'i',
            0, 0,
        ];
        assert_eq!(&m[HEADER_LEN..], body);
        assert!(matches!(
            Request::decode(func::CONNECT, body).unwrap(),
            Request::Connect {
                pd: 1,
                srq: 0x0203,
                depths: QueueDepths { sq: 0x400, rq: 16 },
                ..
            }
        ));
    }

    #[test]
    fn every_request_round_trips_and_truncations_fail() {
        let addr: SocketAddr = "[::1]:9".parse().unwrap();
        let all = [
            Request::Open { pid: 42 },
            Request::AllocPd,
            Request::DeallocPd { pd: 2 },
            Request::RegMr {
                pd: 1,
                access: 3,
                va: None,
                len: 1 << 40,
            },
            Request::DeregMr { stag: 0x1234_5601 },
            Request::ReserveStag,
            Request::RegMrAt {
                stag: 0x1234_5601,
                pd: 1,
                access: 3,
                va: Some(1 << 40),
                len: 8,
            },
            Request::Listen { addr },
            Request::CloseListener { id: 5 },
            Request::Connect {
                pd: 1,
                srq: 0,
                depths: QueueDepths { sq: 256, rq: 256 },
                addr,
                private: Bytes::from(vec![9; 512]),
                recvs: vec![
                    RecvWr {
                        wr_id: 1,
                        sgl: [rdmap::Sge {
                            stag: rdmap::STag::from_u32(0x101),
                            to: 0,
                            len: 64,
                        }]
                        .into(),
                    };
                    MAX_INITIAL_RECVS
                ],
            },
            Request::Accept {
                incoming: 3,
                pd: 1,
                srq: 7,
                depths: QueueDepths { sq: 1, rq: 65536 },
                private: Bytes::new(),
                recvs: Vec::new(),
            },
            Request::Reject {
                incoming: 3,
                private: Bytes::from_static(b"no"),
            },
            Request::Disconnect { qp: 1 },
            Request::DestroyQp { qp: 1 },
            Request::QueryQp { qp: 1 },
            Request::ModifyQp {
                qp: 1,
                change: QpChange::IncomingRdma(false),
            },
            Request::ModifyQp {
                qp: 2,
                change: QpChange::DrainOnLocalFailure(true),
            },
            Request::ModifyQp {
                qp: 3,
                change: QpChange::ResumeSendQueue,
            },
            Request::Stats,
            Request::QueryDevice,
            Request::ServiceStats,
            Request::ListQps { after: 77 },
            Request::CreateSrq { depth: 100 },
            Request::DestroySrq { srq: 7 },
            Request::AllocMw { pd: 1, kind: 2 },
            Request::DeallocMw { stag: 0x201 },
            Request::BindMw {
                mw: 0x201,
                mr: 0x101,
                to: 1 << 40,
                len: 4096,
                access: 0x0f,
                one_touch: true,
            },
            Request::Invalidate { stag: 0x202 },
            Request::AllocFastRegMr {
                pd: 1,
                len: 1 << 20,
            },
        ];
        for req in all {
            let m = req.encode(1);
            let h = Header::parse(&m).unwrap().unwrap();
            assert_eq!(h.len as usize, m.len());
            let body = &m[HEADER_LEN..];
            assert_eq!(Request::decode(h.func, body).unwrap(), req);
            for cut in 0..body.len() {
                assert!(
                    Request::decode(h.func, &body[..cut]).is_err(),
                    "{req:?} cut {cut}"
                );
            }
            let mut long = body.to_vec();
            long.push(0);
            assert!(Request::decode(h.func, &long).is_err());
        }
        assert_eq!(
            Request::decode(0x7777, &[]),
            Err(Malformed("function code"))
        );
        // Private data beyond the MPA limit is refused.
        let mut m = BytesMut::new();
        m.put_u32_le(1);
        m.put_u32_le(1);
        m.put_u32_le(0);
        m.put_u16_le(513);
        m.put_slice(&[0; 513]);
        assert!(Request::decode(func::ACCEPT, &m).is_err());
    }

    #[test]
    fn replies_and_events_round_trip() {
        let info = QpInfo {
            qp: 1,
            num: 77,
            ird: 16,
            ord: 16,
            mulpdu: 1448,
            extensions: 1,
            private: Bytes::from_static(b"advert"),
            geometry: crate::qpseg::Geometry::default(),
            framing: rdmap::Framing {
                crc: true,
                markers_tx: false,
                markers_rx: true,
            },
        };
        // A daemon from before the framing octet: the same reply without it reads as all
        // off.
        let m = Reply::Qp(info.clone()).encode(func::CONNECT, 1);
        assert_eq!(m[m.len() - 1], 0b101);
        assert_eq!(
            Reply::decode(func::CONNECT, &m[HEADER_LEN..m.len() - 1]).unwrap(),
            Reply::Qp(QpInfo {
                framing: rdmap::Framing::default(),
                ..info.clone()
            })
        );
        let cases = [
            (
                func::ALLOC_PD,
                Reply::Pd {
                    pd: 3,
                    push_slots: 32,
                },
            ),
            (func::OPEN, Reply::Id(3)),
            (
                func::QUERY_DEVICE,
                Reply::Device(DeviceAttrs {
                    max_qp: 4096,
                    max_mr: u32::MAX,
                    max_srq: 1024,
                    sq_depth: 256,
                    rq_depth: 128,
                    max_send_sge: 3,
                    max_recv_sge: 2,
                    ird: 16,
                    ord: 8,
                    mulpdu: 1448,
                    mpa_revision: 2,
                    crc: true,
                    markers: false,
                    extensions: 3,
                    push_slots: 32,
                }),
            ),
            (func::CREATE_SRQ, Reply::Srq { srq: 5, depth: 128 }),
            (func::DEREG_MR, Reply::Done),
            (
                func::LISTEN,
                Reply::Listening {
                    id: 2,
                    addr: "127.0.0.1:1".parse().unwrap(),
                },
            ),
            (func::CONNECT, Reply::Qp(info)),
            (
                func::QUERY_QP,
                Reply::QpCounters({
                    let mut c = Counters::default();
                    c.traffic.fpdus_sent = 1;
                    c.traffic.octets_received = [7; OPCODES];
                    c.push.discards = [1, 2, 3, 4, 5, 6];
                    c
                }),
            ),
            (
                func::STATS,
                Reply::Stats(DeviceCounters {
                    queue_pairs: 1,
                    memory_entries: 2,
                    clients: 3,
                    connections: 9,
                    totals: {
                        let mut c = Counters::default();
                        c.traffic.terminates_received = 4;
                        c
                    },
                    ..DeviceCounters::default()
                }),
            ),
            (
                func::REG_MR,
                Reply::Error {
                    code: error::NOT_FOUND,
                    text: "no such protection domain".into(),
                },
            ),
            (
                func::CONNECT,
                Reply::Rejected {
                    private_data: Bytes::from_static(b"go away"),
                    refused: rdmap::Refused { crc: true },
                },
            ),
        ];
        for (f, reply) in cases {
            let m = reply.encode(f, 9);
            let h = Header::parse(&m).unwrap().unwrap();
            assert_eq!((h.func, h.txn), (f | func::REPLY, 9));
            assert_eq!(Reply::decode(f, &m[HEADER_LEN..]).unwrap(), reply);
        }
        assert_eq!(
            &Reply::Id(3).encode(func::ALLOC_PD, 9)[HEADER_LEN..],
            &[0, 0, 3, 0, 0, 0]
        );
        let srq = Reply::Srq { srq: 5, depth: 128 }.encode(func::CREATE_SRQ, 9);
        assert_eq!(&srq[HEADER_LEN..], &[0, 0, 5, 0, 0, 0, 128, 0, 0, 0]);
        assert_eq!(
            reply_fds(func::CREATE_SRQ | func::REPLY, &srq[HEADER_LEN..]),
            1
        );
        let bind = Request::BindMw {
            mw: 0x0201,
            mr: 0x0101,
            to: 0x10,
            len: 0x20,
            access: 0x0c,
            one_touch: true,
        }
        .encode(9);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x13, 0, 7, 0,
            9, 0, 0, 0, 0, 0, 0, 0,
            1, 2, 0, 0,  1, 1, 0, 0,
            0x10, 0, 0, 0, 0, 0, 0, 0,
            0x20, 0, 0, 0, 0, 0, 0, 0,
            0x0c, 0, 0, 0,  1,
        ];
        assert_eq!(&bind[4..], want);
        assert_eq!(request_fds(func::ALLOC_FAST_REG_MR), 1);
        assert!(
            Request::decode(func::ALLOC_MW, &[1, 0, 0, 0, 3]).is_err(),
            "type 3"
        );
        assert_eq!(
            &Request::CreateSrq { depth: 100 }.encode(9)[4..8],
            &[0x0f, 0, 7, 0],
            "function 0x000f, version 7"
        );
        let ev = Event::QpEnded {
            qp: 4,
            how: end::TERMINATED_BY_PEER,
            term: [0x12, 0x03],
        };
        let m = ev.encode();
        assert_eq!(&m[HEADER_LEN..], &[4, 0, 0, 0, 1, 0x12, 0x03]);
        assert_eq!(
            Event::decode(func::EVENT_QP_ENDED, &m[HEADER_LEN..]).unwrap(),
            ev
        );
        let inc = Event::Incoming {
            listener: 1,
            id: 2,
            peer: "10.0.0.1:5".parse().unwrap(),
            private: Bytes::from_static(b"x"),
        };
        let m = inc.encode();
        assert_eq!(
            Event::decode(func::EVENT_INCOMING, &m[HEADER_LEN..]).unwrap(),
            inc
        );
    }

    #[test]
    fn header_lengths_outside_the_limits_are_malformed() {
        let mut m = Request::AllocPd.encode(0).to_vec();
        assert!(Header::parse(&m[..15]).is_none());
        m[..4].copy_from_slice(&15u32.to_le_bytes());
        assert!(Header::parse(&m).unwrap().is_err());
        m[..4].copy_from_slice(&(MAX_MESSAGE as u32 + 1).to_le_bytes());
        assert!(Header::parse(&m).unwrap().is_err());
    }
}

#[cfg(test)]
mod device_attrs_tests {
    use super::*;

    #[test]
    fn device_attrs_are_little_endian_words_then_flags() {
        let a = DeviceAttrs {
            max_qp: 1,
            max_mr: 2,
            max_srq: 3,
            sq_depth: 4,
            rq_depth: 5,
            max_send_sge: 6,
            max_recv_sge: 7,
            ird: 0x0102,
            ord: 0x0304,
            mulpdu: 0x0506,
            mpa_revision: 2,
            crc: true,
            markers: true,
            extensions: 3,
            push_slots: 0x20,
        };
        let mut out = BytesMut::new();
        a.put(&mut out);
        let mut want = Vec::new();
        for v in 1u32..=7 {
            want.extend_from_slice(&v.to_le_bytes());
        }
        want.extend_from_slice(&[0x02, 0x01, 0x04, 0x03, 0x06, 0x05, 2, 0b11]);
        want.extend_from_slice(&[3, 0, 0, 0, 0x20, 0, 0, 0]);
        assert_eq!(&out[..], &want[..]);
        assert_eq!(DeviceAttrs::read(&mut Reader::new(&want)).unwrap(), a);
    }
}
