//! Region octets: a [`shm::Region`] (a memfd mapping, or memory the application handed
//! over without a copy), one `Arc` per region, aliased by the windows bound to it.
//!
//! An access clones the `Arc` while the TPT's checks run, then copies without holding the
//! table lock, so the strong count tells how much work is still in flight.
//! [`Tpt::deregister`](super::Tpt::deregister) hands the caller the table's `Arc` at once;
//! the octets go back to the system when the last `Arc` is dropped.

use rdmap::AccessError;

/// The TPT checked the range before the copy, so a range outside the region cannot occur;
/// if it did, it fails cleanly as a bounds error.
pub(super) fn bounds(_: shm::OutOfRange) -> AccessError {
    AccessError::Bounds
}
