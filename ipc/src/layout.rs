//! Fixed layouts, in the smoltcp style: each layout has a `field` module naming the octet
//! range of every field ([`Field`]), and code reads and writes fields by those names, never
//! by a bare offset.
//!
//! Entries and headers are little-endian. In a buffer, fields are read and written with
//! [`read_u32`] and friends; in a shared-memory segment, where the other side writes
//! concurrently, a field is an atomic word ([`seg_u32`], [`seg_u64`]).

use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64};

use shm::Segment;

/// The octets of one field within its layout.
pub(crate) type Field = Range<usize>;

/// `field` moved `by` octets further: the same field of the entry or slot at `by`.
pub(crate) fn shifted(field: Field, by: usize) -> Field {
    field.start + by..field.end + by
}

/// Element `i` of an array whose first element is `first`, elements end to end.
pub(crate) fn nth(first: Field, i: usize) -> Field {
    let len = first.len();
    shifted(first, i * len)
}

/// The little-endian u16 in `field` (two octets).
pub(crate) fn read_u16(data: &[u8], field: Field) -> u16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&data[field]);
    u16::from_le_bytes(b)
}

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

/// Writes `value` little-endian into `field` (two octets).
pub(crate) fn write_u16(data: &mut [u8], field: Field, value: u16) {
    data[field].copy_from_slice(&value.to_le_bytes());
}

/// Writes `value` little-endian into `field` (four octets).
pub(crate) fn write_u32(data: &mut [u8], field: Field, value: u32) {
    data[field].copy_from_slice(&value.to_le_bytes());
}

/// Writes `value` little-endian into `field` (eight octets).
pub(crate) fn write_u64(data: &mut [u8], field: Field, value: u64) {
    data[field].copy_from_slice(&value.to_le_bytes());
}

/// The atomic u32 word of `seg` that `field` (four octets) names.
pub(crate) fn seg_u32(seg: &Segment, field: Field) -> &AtomicU32 {
    debug_assert_eq!(field.len(), 4, "a u32 field");
    seg.u32(field.start)
}

/// The atomic u64 word of `seg` that `field` (eight octets) names.
pub(crate) fn seg_u64(seg: &Segment, field: Field) -> &AtomicU64 {
    debug_assert_eq!(field.len(), 8, "a u64 field");
    seg.u64(field.start)
}
