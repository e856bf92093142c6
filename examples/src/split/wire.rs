//! The control messages of the push-push protocol: what travels as an RDMA **Send** into
//! the peer's pre-posted receive buffers.
//!
//! Every message starts with the same 16-octet header, big-endian (the seed draws its
//! BufferPoolFlush layouts as 32-bit rows, bit 31 on the left, and states no byte order;
//! we pick network order):
//!
//! ```text
//!  0      function (16) | version (16)
//!  4..12  transaction context (64)      copied from the request into its reply
//! 12      grant (16)    | reserved (16) receive credits returned (our addition) | zero
//! 16..    body, its length implied by the message length
//! ```
//!
//! The first 12 octets are the seed's FlushRequest/FlushReply header word for word; the
//! grant word is ours (the seed has "message flow control" but no field for it).

use bytes::{BufMut, Bytes, BytesMut};
use std::fmt;

use super::indicate::Indication;

/// The protocol version this program speaks.
pub const VERSION: u16 = 1;
/// Octets of the common header.
pub const HEADER_LEN: usize = 16;
/// The largest message: the size of every posted receive buffer. A longer Send would
/// not fit the peer's buffer and end the connection, so [`Msg::encode`] refuses it.
pub const MAX_MSG: usize = 256;

/// One advertised pool: an array of `count` elements of `size` octets, registered under
/// `stag` starting at tagged offset `to` (the seed's BufferRecvPool entry, plus the memory
/// handle an RDMA Write needs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolAdvert {
    /// The pool reference the indications name.
    pub pool: u32,
    /// The region's STag, as a number.
    pub stag: u32,
    /// Tagged offset of element 0.
    pub to: u64,
    /// Number of elements.
    pub count: u32,
    /// Octets per element.
    pub size: u32,
}

/// What a message says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// BufferRecvPool: the pools the peer may RDMA Write into (sent once, at start).
    RecvPool(Vec<PoolAdvert>),
    /// BufferRecvPoolUpdate: `(pool, n)`: the next `n` elements of `pool`, in ring order,
    /// are free again (element credits returned).
    PoolUpdate(Vec<(u32, u32)>),
    /// BufferPoolFlushRequest: stop writing into these pools and reply.
    FlushRequest(Vec<u32>),
    /// BufferPoolFlushReply: the pools of the request with this context are no longer used.
    FlushReply,
    /// BufferRDMAIndicate: the indication that does not fit 32-bit immediate data.
    Indicate(Indication),
    /// Nothing but the header's grant: returns receive credits when there is no other
    /// message to carry them.
    Credit,
    /// The sender pushed all its data: `messages` messages, `bytes` octets.
    Done {
        /// Messages pushed.
        messages: u64,
        /// Octets pushed.
        bytes: u64,
    },
    /// The sender received everything and owes no reply; it sends nothing more.
    Bye,
    /// The request with this context was refused; `supported` is the version this side
    /// speaks.
    Error {
        /// Why ([`ERR_VERSION`]).
        code: u16,
        /// The version this side speaks.
        supported: u16,
    },
}

/// [`Body::Error`] code: the request's protocol version is not supported.
pub const ERR_VERSION: u16 = 1;

/// A message: header fields plus body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    /// Transaction context (requests choose it, replies echo it).
    pub ctx: u64,
    /// Receive credits returned to the peer.
    pub grant: u16,
    /// What it says.
    pub body: Body,
}

/// Why a message could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer octets than the header or the body needs.
    Short {
        /// Octets present.
        len: usize,
    },
    /// A body whose length is not a whole number of entries, or has extra octets.
    BadLength {
        /// The function code.
        function: u16,
        /// Body octets.
        len: usize,
    },
    /// A function code this version does not define.
    UnknownFunction(u16),
    /// Nonzero reserved bits.
    Reserved,
    /// A version this program does not speak. Reply with [`Body::Error`] echoing `ctx`.
    Version {
        /// The version the message carried.
        version: u16,
        /// Its transaction context.
        ctx: u64,
    },
    /// The encoded message would not fit a receive buffer ([`MAX_MSG`]).
    TooLong {
        /// Octets it would take.
        len: usize,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short { len } => write!(f, "truncated control message ({len} octets)"),
            Self::BadLength { function, len } => {
                write!(f, "function {function:#06x} with a {len}-octet body")
            }
            Self::UnknownFunction(code) => write!(f, "unknown function {code:#06x}"),
            Self::Reserved => f.write_str("nonzero reserved bits in a control message"),
            Self::Version { version, .. } => write!(
                f,
                "the peer speaks protocol version {version}, this program speaks {VERSION}; \
                 run the same build of `split` on both hosts"
            ),
            Self::TooLong { len } => write!(
                f,
                "a {len}-octet control message does not fit the {MAX_MSG}-octet receive buffers"
            ),
        }
    }
}

impl std::error::Error for WireError {}

const F_RECV_POOL: u16 = 0x0001;
const F_POOL_UPDATE: u16 = 0x0002;
const F_FLUSH_REQUEST: u16 = 0x0003;
const F_FLUSH_REPLY: u16 = 0x0004;
const F_INDICATE: u16 = 0x0005;
const F_CREDIT: u16 = 0x0006;
const F_DONE: u16 = 0x0007;
const F_BYE: u16 = 0x0008;
const F_ERROR: u16 = 0x00FF;

impl Msg {
    /// A message with no grant and no context.
    pub fn new(body: Body) -> Self {
        Self {
            ctx: 0,
            grant: 0,
            body,
        }
    }

    /// The wire form, with protocol `version` (always [`VERSION`] except in tests).
    pub fn encode_version(&self, version: u16) -> Result<Bytes, WireError> {
        let mut b = BytesMut::with_capacity(MAX_MSG);
        b.put_u16(self.function());
        b.put_u16(version);
        b.put_u64(self.ctx);
        b.put_u16(self.grant);
        b.put_u16(0);
        match &self.body {
            Body::RecvPool(pools) => pools.iter().for_each(|p| {
                b.put_u32(p.pool);
                b.put_u32(p.stag);
                b.put_u64(p.to);
                b.put_u32(p.count);
                b.put_u32(p.size);
            }),
            Body::PoolUpdate(updates) => updates.iter().for_each(|&(pool, n)| {
                b.put_u32(pool);
                b.put_u32(n);
            }),
            Body::FlushRequest(pools) => pools.iter().for_each(|&p| b.put_u32(p)),
            Body::Indicate(i) => {
                b.put_u32(i.pool);
                b.put_u32(i.element);
                b.put_u32(i.len);
            }
            Body::Done { messages, bytes } => {
                b.put_u64(*messages);
                b.put_u64(*bytes);
            }
            Body::Error { code, supported } => {
                b.put_u16(*code);
                b.put_u16(*supported);
            }
            Body::FlushReply | Body::Credit | Body::Bye => {}
        }
        if b.len() > MAX_MSG {
            return Err(WireError::TooLong { len: b.len() });
        }
        Ok(b.freeze())
    }

    /// The wire form at [`VERSION`].
    pub fn encode(&self) -> Result<Bytes, WireError> {
        self.encode_version(VERSION)
    }

    /// Parses one received message. Never panics, whatever `src` holds.
    pub fn decode(src: &[u8]) -> Result<Self, WireError> {
        let short = WireError::Short { len: src.len() };
        let (head, body) = src.split_at_checked(HEADER_LEN).ok_or(short)?;
        let mut h = Reader(head);
        let (function, version, ctx) = (h.u16(), h.u16(), h.u64());
        let (grant, reserved) = (h.u16(), h.u16());
        if version != VERSION {
            return Err(WireError::Version { version, ctx });
        }
        if reserved != 0 {
            return Err(WireError::Reserved);
        }
        let bad = WireError::BadLength {
            function,
            len: body.len(),
        };
        let entries = |size: usize| {
            (body.len() % size == 0)
                .then(|| body.chunks_exact(size).map(Reader))
                .ok_or_else(|| bad.clone())
        };
        let fixed = |size: usize| {
            (body.len() == size)
                .then_some(Reader(body))
                .ok_or_else(|| bad.clone())
        };
        let body = match function {
            F_RECV_POOL => Body::RecvPool(
                entries(24)?
                    .map(|mut r| PoolAdvert {
                        pool: r.u32(),
                        stag: r.u32(),
                        to: r.u64(),
                        count: r.u32(),
                        size: r.u32(),
                    })
                    .collect(),
            ),
            F_POOL_UPDATE => {
                Body::PoolUpdate(entries(8)?.map(|mut r| (r.u32(), r.u32())).collect())
            }
            F_FLUSH_REQUEST => Body::FlushRequest(entries(4)?.map(|mut r| r.u32()).collect()),
            F_FLUSH_REPLY => fixed(0).map(|_| Body::FlushReply)?,
            F_INDICATE => {
                let mut r = fixed(12)?;
                Body::Indicate(Indication {
                    pool: r.u32(),
                    element: r.u32(),
                    len: r.u32(),
                })
            }
            F_CREDIT => fixed(0).map(|_| Body::Credit)?,
            F_DONE => {
                let mut r = fixed(16)?;
                Body::Done {
                    messages: r.u64(),
                    bytes: r.u64(),
                }
            }
            F_BYE => fixed(0).map(|_| Body::Bye)?,
            F_ERROR => {
                let mut r = fixed(4)?;
                Body::Error {
                    code: r.u16(),
                    supported: r.u16(),
                }
            }
            other => return Err(WireError::UnknownFunction(other)),
        };
        Ok(Self { ctx, grant, body })
    }

    fn function(&self) -> u16 {
        match self.body {
            Body::RecvPool(_) => F_RECV_POOL,
            Body::PoolUpdate(_) => F_POOL_UPDATE,
            Body::FlushRequest(_) => F_FLUSH_REQUEST,
            Body::FlushReply => F_FLUSH_REPLY,
            Body::Indicate(_) => F_INDICATE,
            Body::Credit => F_CREDIT,
            Body::Done { .. } => F_DONE,
            Body::Bye => F_BYE,
            Body::Error { .. } => F_ERROR,
        }
    }
}

/// Big-endian reads from a slice whose length the caller checked; a short slice reads
/// zeros instead of panicking.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        if let Some((head, rest)) = self.0.split_first_chunk::<N>() {
            out = *head;
            self.0 = rest;
        }
        out
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}
