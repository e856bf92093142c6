//! The header every message starts with ([`Header`]), its fields named in [`field`].

use bytes::{Bytes, BytesMut};

use super::{MAX_MESSAGE, VERSION};
use crate::codec::Malformed;
use crate::layout::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};

mod field {
    use crate::layout::Field;

    pub(crate) const LEN: Field = 0..4;
    pub(crate) const FUNC: Field = 4..6;
    pub(crate) const VERSION: Field = 6..8;
    pub(crate) const TXN: Field = 8..16;
}

/// Octets of the header.
pub const HEADER_LEN: usize = field::TXN.end;

/// The header every message starts with: 16 octets, little-endian.
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 4 | length of the whole message, header included (16 ..= [`MAX_MESSAGE`]) |
/// | 4 | 2 | function code: a request's; a reply's is the request's \| 0x8000; events 0x40xx |
/// | 6 | 2 | protocol version ([`VERSION`]) |
/// | 8 | 8 | transaction context: chosen by the client, echoed in the reply; 0 in events |
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
        let buf = buf.get(..HEADER_LEN)?;
        let h = Self {
            len: read_u32(buf, field::LEN),
            func: read_u16(buf, field::FUNC),
            version: read_u16(buf, field::VERSION),
            txn: read_u64(buf, field::TXN),
        };
        let len = h.len as usize;
        Some(if (HEADER_LEN..=MAX_MESSAGE).contains(&len) {
            Ok(h)
        } else {
            Err(Malformed("message length"))
        })
    }
}

/// A message of function `func` in transaction `txn` so far: its header, the length
/// left for [`finish`] to fill in. The body follows.
pub(super) fn start(func: u16, txn: u64) -> BytesMut {
    let mut out = BytesMut::with_capacity(64);
    out.resize(HEADER_LEN, 0);
    write_u16(&mut out, field::FUNC, func);
    write_u16(&mut out, field::VERSION, VERSION);
    write_u64(&mut out, field::TXN, txn);
    out
}

/// The whole message: `out` with its length in the header.
pub(super) fn finish(mut out: BytesMut) -> Bytes {
    let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
    write_u32(&mut out, field::LEN, len);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Request;

    #[test]
    fn the_header_is_length_function_version_transaction() {
        let mut m = start(0x0102, 0xa1a2_a3a4_a5a6_a7a8);
        m.extend_from_slice(b"body");
        let m = finish(m);
        #[rustfmt::skip]
        let want: &[u8] = &[
            20, 0, 0, 0,  0x02, 0x01,  0x08, 0x00,
            0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1,
            b'b', b'o', b'd', b'y',
        ];
        assert_eq!(&m[..], want);
        assert_eq!(
            Header::parse(&m),
            Some(Ok(Header {
                len: 20,
                func: 0x0102,
                version: 8,
                txn: 0xa1a2_a3a4_a5a6_a7a8,
            }))
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
