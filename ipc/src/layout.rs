//! Fixed layouts, in the smoltcp style: each layout has a `field` module naming the octet
//! range of every field ([`Field`]), and code reads and writes fields by those names, never
//! by a bare offset.
//!
//! Entries and headers are little-endian; fields are read and written with [`read_u32`]
//! and friends.

use std::ops::Range;

/// The octets of one field within its layout.
pub(crate) type Field = Range<usize>;

/// The little-endian u32 in `field` (four octets).
pub(crate) fn read_u32(data: &[u8], field: Field) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[field]);
    u32::from_le_bytes(b)
}

/// The little-endian u64 in `field` (eight octets).
pub(crate) fn read_u64(data: &[u8], field: Field) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[field]);
    u64::from_le_bytes(b)
}

/// Writes `value` little-endian into `field` (four octets).
pub(crate) fn write_u32(data: &mut [u8], field: Field, value: u32) {
    data[field].copy_from_slice(&value.to_le_bytes());
}

/// Writes `value` little-endian into `field` (eight octets).
pub(crate) fn write_u64(data: &mut [u8], field: Field, value: u64) {
    data[field].copy_from_slice(&value.to_le_bytes());
}
