//! The transfer indication: after an RDMA Write into element `element` of pool `pool`,
//! the sender tells the owner which element it consumed and how many octets it wrote.
//!
//! Two forms (seed 002, "RDMA Transfer"):
//!
//! * **32-bit immediate data**, when every pool reference, element index and length of
//!   the pool fits 8/8/16 bits ([`fits_idata`]). Carried by RFC 7306 *Immediate Data*
//!   (our [`SendOp::Immediate`](verbs::SendOp::Immediate), 8 octets), which the owner sees
//!   as [`Completion::immediate`](verbs::Completion::immediate) of a receive that places
//!   nothing; see [`Immediate`] for the layout of the 64 bits.
//! * **BufferRDMAIndicate**, a small Send ([`Body::Indicate`](super::wire::Body)), when
//!   it does not fit: more than 256 pools or elements, or elements over 65535 octets.
//!
//! Either way the indication travels on the same queue pair after the Write, so RDMAP
//! ordering guarantees the written octets are placed before the owner sees it.

/// Which element was written, and with how many octets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Indication {
    /// The pool reference.
    pub pool: u32,
    /// The element index in the pool.
    pub element: u32,
    /// Octets written at the start of the element (at most the element size).
    pub len: u32,
}

/// True if indications for a pool of `count` elements of `size` octets, among `pools`
/// pools, always fit 32-bit immediate data: pool references and element indexes below
/// 256, lengths at most 65535.
pub fn fits_idata(pools: usize, count: u32, size: u32) -> bool {
    pools <= 256 && count <= 256 && size <= 0xFFFF
}

impl Indication {
    /// The 32-bit immediate data: `pool` in bits 31..24, `element` in bits 23..16, `len`
    /// in bits 15..0 (most significant first, as the seed lists them), so `(7, 5, 256)`
    /// is `0x0705_0100`. `None` if a field does not fit.
    pub fn pack(self) -> Option<u32> {
        let pool = u8::try_from(self.pool).ok()?;
        let element = u8::try_from(self.element).ok()?;
        let len = u16::try_from(self.len).ok()?;
        Some(u32::from(pool) << 24 | u32::from(element) << 16 | u32::from(len))
    }

    /// The inverse of [`pack`](Self::pack); every 32-bit value is some indication.
    pub fn unpack(idata: u32) -> Self {
        Self {
            pool: idata >> 24,
            element: (idata >> 16) & 0xFF,
            len: idata & 0xFFFF,
        }
    }
}

/// The 64 bits of an Immediate Data message: the seed's 32-bit `idata` in the low half,
/// the receive credits returned ([`Msg::grant`](super::wire::Msg)) in bits 47..32, and
/// bits 63..48 reserved (zero).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Immediate {
    /// The packed indication.
    pub idata: u32,
    /// Receive credits returned.
    pub grant: u16,
}

impl Immediate {
    /// The 64-bit value to send.
    pub fn to_u64(self) -> u64 {
        u64::from(self.grant) << 32 | u64::from(self.idata)
    }

    /// Parses a received value; `None` if reserved bits are set.
    pub fn from_u64(v: u64) -> Option<Self> {
        (v >> 48 == 0).then_some(Self {
            idata: v as u32,
            grant: (v >> 32) as u16,
        })
    }
}
