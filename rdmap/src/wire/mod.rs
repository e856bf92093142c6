//! RDMAP wire formats (RFC 5040 §4, RFC 7306 §4–§6), smoltcp style.
//!
//! Every header that RDMAP adds after the DDP header has two faces:
//!
//! * a `…Packet<T: AsRef<[u8]>>` view with typed getters and setters over a private
//!   `field` module of byte ranges. `new_unchecked` wraps any buffer; `check_len` proves
//!   that no getter can panic; `new_checked` is both and is mandatory for peer input.
//!   Emitting goes through `new_unchecked` on a buffer of exactly `buffer_len()` octets.
//! * a `…Repr` with `parse(&[u8]) -> Result<Self, WireError>`, `emit(&self, &mut [u8])` and
//!   `buffer_len()`. `parse` never panics, whatever the input. `emit` panics only if the
//!   buffer is shorter than `buffer_len()`, which is a local programming error.
//!
//! All offsets are relative to the first octet of the RDMAP header itself, i.e. the first
//! octet after the 14- or 18-octet DDP header. Multi-octet fields are big-endian.
//!
//! | module | header |
//! |---|---|
//! | [`opcode`] | the 4-bit RDMAP opcode |
//! | [`control`] | the RDMAP control octet (DDP RsvdULP octet 1) |
//! | [`read_request`] | the 28-octet RDMA Read Request header |
//! | [`atomic`] | the 52-octet Atomic Request and 12-octet Atomic Response headers |
//! | [`immediate`] | the 8 octets of Immediate Data |
//! | [`terminate`] | the variable-length Terminate header |

/// Defines a fixed-length header view (smoltcp style): the struct over a buffer and its
/// `new_unchecked`, `new_checked`, `check_len` (at least `$len` octets) and `into_inner`.
/// The getters and setters are written next to each use.
macro_rules! fixed_len_packet {
    ($(#[$doc:meta])* $name:ident, $len:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length. Getters may panic unless
            /// [`check_len`](Self::check_len) succeeded; use this only to emit.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer and checks that every getter is in bounds. Use this for peer
            /// input.
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::WireError> {
                let packet = Self::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            #[doc = concat!("Checks that the buffer holds at least [`", stringify!($len), "`] octets.")]
            pub fn check_len(&self) -> Result<(), $crate::wire::WireError> {
                if self.buffer.as_ref().len() < $len {
                    Err($crate::wire::WireError::Truncated)
                } else {
                    Ok(())
                }
            }

            /// Consumes the view and returns the buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub mod atomic;
pub mod control;
pub mod immediate;
pub mod opcode;
pub mod read_request;
pub mod read_v2;
pub mod terminate;

pub use atomic::{
    ATOMIC_REQUEST_LEN, ATOMIC_RESPONSE_LEN, AtomicOp, AtomicRequestPacket, AtomicRequestRepr,
    AtomicResponsePacket, AtomicResponseRepr,
};
pub use control::{RDMAP_VERSION, RdmapControl};
pub use immediate::{IMMEDIATE_LEN, ImmediatePacket, ImmediateRepr, SEND_IMM_LEN};
pub use opcode::Opcode;
pub use read_request::{READ_REQUEST_LEN, ReadRequestPacket, ReadRequestRepr};
pub use read_v2::{READ_V2_FLAG, READ_V2_REQUEST_LEN, ReadV2RequestRepr};
pub use terminate::{
    CopiedDdpHeader, TERMINATE_CONTROL_LEN, TERMINATE_MAX_LEN, TerminatePacket, TerminateRepr,
};

use core::fmt;
use core::ops::Range;

/// Why a buffer could not be parsed as an RDMAP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer is shorter than the header (including the parts its flags announce).
    Truncated,
    /// The buffer has the wrong length for a fixed-size field, or non-zero octets follow a
    /// Terminate header.
    Malformed,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("malformed header: truncated"),
            Self::Malformed => f.write_str("malformed header: bad length or trailing data"),
        }
    }
}

impl std::error::Error for WireError {}

/// A byte range inside a header.
pub(crate) type Field = Range<usize>;

/// Reads a big-endian `u32`. Panics if `field` is out of bounds (callers check first).
pub(crate) fn read_u32(data: &[u8], field: Field) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[field]);
    u32::from_be_bytes(b)
}

/// Reads a big-endian `u64`. Panics if `field` is out of bounds (callers check first).
pub(crate) fn read_u64(data: &[u8], field: Field) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[field]);
    u64::from_be_bytes(b)
}

/// Writes a big-endian `u32`. Panics if `field` is out of bounds.
pub(crate) fn write_u32(data: &mut [u8], field: Field, value: u32) {
    data[field].copy_from_slice(&value.to_be_bytes());
}

/// Writes a big-endian `u64`. Panics if `field` is out of bounds.
pub(crate) fn write_u64(data: &mut [u8], field: Field, value: u64) {
    data[field].copy_from_slice(&value.to_be_bytes());
}

/// Test helpers shared by the header tests.
#[cfg(test)]
pub(crate) mod test_util {
    /// Decodes a whitespace-separated hex dump (offset prefixes like `0010:` are skipped).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .filter(|t| !t.ends_with(':'))
            .map(|t| u8::from_str_radix(t, 16).expect("test vector hex"))
            .collect()
    }

    /// Strips the MPA framing of a §5.4/§5.5 FPDU (2-octet ULPDU_Length, pad and CRC),
    /// returning the ULPDU (DDP header onward).
    pub(crate) fn ulpdu(fpdu: &[u8]) -> &[u8] {
        let len = usize::from(u16::from_be_bytes([fpdu[0], fpdu[1]]));
        &fpdu[2..2 + len]
    }

    #[test]
    fn ulpdu_strips_framing() {
        let f = hex("0000: 00 13 41 43 00 00 00 00 00 00 00 00 00 00 00 02
                     0010: 00 00 00 00 5a 00 00 00 3a c1 dc fd");
        let u = ulpdu(&f);
        assert_eq!(u.len(), 19);
        assert_eq!(u.first(), Some(&0x41));
        assert_eq!(u.last(), Some(&0x5a));
    }
}
