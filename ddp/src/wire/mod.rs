//! Byte-level views of DDP headers, in the smoltcp style.
//!
//! * [`control`]: the T / L / DV control octet shared by both header kinds.
//! * [`tagged`]: the 14-octet tagged header ([`TaggedPacket`], [`TaggedRepr`]).
//! * [`untagged`]: the 18-octet untagged header ([`UntaggedPacket`], [`UntaggedRepr`]).
//!
//! The contract is smoltcp's:
//! * `Packet::new_unchecked` wraps a buffer without looking at it; its accessors
//!   panic if the buffer is shorter than the header.
//! * `Packet::check_len` proves that no accessor can panic, and `new_checked` is
//!   `new_unchecked` + `check_len`. Use it (or `Repr::parse`, which calls `check_len`
//!   itself) for anything that came from the peer.
//! * `Repr::parse` never panics. `Repr::emit` never panics on a buffer of at least
//!   `Repr::buffer_len()` octets, and writes every header octet (reserved bits zero).
//!
//! All multi-octet fields are big-endian.

pub mod control;
pub mod tagged;
pub mod untagged;

pub use control::Control;
pub use tagged::{TaggedPacket, TaggedRepr};
pub use untagged::{UntaggedPacket, UntaggedRepr};

/// A byte range within a header.
type Field = core::ops::Range<usize>;

fn read_u32(data: &[u8], field: Field) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[field]);
    u32::from_be_bytes(b)
}

fn read_u64(data: &[u8], field: Field) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[field]);
    u64::from_be_bytes(b)
}

fn write_u32(data: &mut [u8], field: Field, value: u32) {
    data[field].copy_from_slice(&value.to_be_bytes());
}

fn write_u64(data: &mut [u8], field: Field, value: u64) {
    data[field].copy_from_slice(&value.to_be_bytes());
}
