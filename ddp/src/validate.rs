//! Receive-side placement checks (RFC 5041 §7.2).

use crate::DdpError;

/// The one tagged-bounds check of the stack (the TPT, the stream's Read Response
/// placement and the tests all use it, so one access always gets one answer): where
/// `[to, to + len)` starts inside a region covering `[base, base + region_len)`, as an
/// offset from `base`.
///
/// * [`DdpError::ToWrap`] (checked first) if `to + len` exceeds 2^64, i.e. the access
///   would address past the top of the 64-bit TO space. An access whose last octet is
///   exactly at TO 2^64 - 1 (`to + len == 2^64`) does not wrap.
/// * [`DdpError::BaseBounds`] unless `base <= to` and `to + len <= base + region_len`.
///   A region that itself extends past 2^64 is treated as ending there. A zero-length
///   access must lie inside the region too (its end may be the region's end).
///
/// All arithmetic is in `u128`: nothing overflows.
pub fn tagged_offset(to: u64, len: u64, base: u64, region_len: u64) -> Result<u64, DdpError> {
    const TO_SPACE: u128 = 1 << 64;
    let end = u128::from(to) + u128::from(len);
    if end > TO_SPACE {
        return Err(DdpError::ToWrap);
    }
    let region_end = u128::from(base) + u128::from(region_len);
    if to < base || end > region_end {
        return Err(DdpError::BaseBounds);
    }
    Ok(to - base)
}

/// Untagged checks for one segment of a message on a given queue, for an in-order
/// byte stream. The caller has already checked the QN ([`DdpError::InvalidQn`]).
///
/// `expected_msn` is the MSN the sink expects for this segment (the message in
/// progress, or the next new one); `buffer_len` is the length of the receive buffer
/// the message is being placed into, or `None` if no buffer is posted.
///
/// In order: `msn != expected_msn` gives [`DdpError::MsnRange`]; no buffer gives
/// [`DdpError::NoBuffer`]; `mo > buffer_len` gives [`DdpError::InvalidMo`];
/// `mo + payload_len > buffer_len` (u64 arithmetic, no overflow) gives
/// [`DdpError::TooLong`].
pub fn check_untagged(
    msn: u32,
    expected_msn: u32,
    mo: u32,
    payload_len: u32,
    buffer_len: Option<u32>,
) -> Result<(), DdpError> {
    if msn != expected_msn {
        return Err(DdpError::MsnRange);
    }
    let buffer_len = buffer_len.ok_or(DdpError::NoBuffer)?;
    if mo > buffer_len {
        return Err(DdpError::InvalidMo);
    }
    if u64::from(mo) + u64::from(payload_len) > u64::from(buffer_len) {
        return Err(DdpError::TooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x1000;
    const LEN: u64 = 0x100;

    #[test]
    fn tagged_exact_fit() {
        assert_eq!(tagged_offset(BASE, 0x100, BASE, LEN).map(|_| ()), Ok(()));
        assert_eq!(tagged_offset(BASE + 0xFF, 1, BASE, LEN).map(|_| ()), Ok(()));
        assert_eq!(
            tagged_offset(BASE + 0x10, 0x20, BASE, LEN).map(|_| ()),
            Ok(())
        );
    }

    #[test]
    fn tagged_one_byte_past_the_end() {
        assert_eq!(
            tagged_offset(BASE, 0x101, BASE, LEN).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
        assert_eq!(
            tagged_offset(BASE + 0xFF, 2, BASE, LEN).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
        assert_eq!(
            tagged_offset(BASE + LEN, 1, BASE, LEN).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
    }

    #[test]
    fn tagged_to_below_base() {
        assert_eq!(
            tagged_offset(BASE - 1, 1, BASE, LEN).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
        assert_eq!(
            tagged_offset(BASE - 1, 2, BASE, LEN).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
        assert_eq!(
            tagged_offset(0, 1, BASE, LEN).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
    }

    #[test]
    fn tagged_offset_is_strict_and_exact_at_the_top_of_the_to_space() {
        assert_eq!(tagged_offset(BASE + 0x10, 0, BASE, LEN), Ok(0x10));
        assert_eq!(tagged_offset(BASE + LEN, 0, BASE, LEN), Ok(LEN));
        assert_eq!(
            tagged_offset(BASE - 1, 0, BASE, LEN),
            Err(DdpError::BaseBounds)
        );
        // The last octet at 2^64 - 1 does not wrap; one more does.
        assert_eq!(tagged_offset(u64::MAX - 7, 8, u64::MAX - 15, 16), Ok(8));
        assert_eq!(
            tagged_offset(u64::MAX - 7, 9, u64::MAX - 15, 16),
            Err(DdpError::ToWrap)
        );
        assert_eq!(tagged_offset(0, u64::MAX, 0, u64::MAX), Ok(0));
        assert_eq!(
            tagged_offset(1, u64::MAX, 0, u64::MAX),
            Err(DdpError::BaseBounds)
        );
        assert_eq!(
            tagged_offset(2, u64::MAX, 0, u64::MAX),
            Err(DdpError::ToWrap)
        );
    }

    #[test]
    fn tagged_wrap_at_2_64() {
        // Wrap is reported before bounds, even for a region nowhere near.
        assert_eq!(
            tagged_offset(u64::MAX, 2, BASE, LEN).map(|_| ()),
            Err(DdpError::ToWrap)
        );
        assert_eq!(
            tagged_offset(u64::MAX - 9, u64::from(u32::MAX), 0, u64::MAX).map(|_| ()),
            Err(DdpError::ToWrap)
        );
        // Last octet exactly at 2^64 - 1: no wrap; in bounds of a region reaching the top.
        assert_eq!(
            tagged_offset(u64::MAX, 1, u64::MAX - 15, 16).map(|_| ()),
            Ok(())
        );
        assert_eq!(
            tagged_offset(u64::MAX - 3, 4, u64::MAX, 1).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
        // A region whose end overflows u64 does not overflow the check.
        assert_eq!(
            tagged_offset(u64::MAX - 1, 2, u64::MAX - 1, u64::MAX).map(|_| ()),
            Ok(())
        );
    }

    #[test]
    fn tagged_empty_region_rejects_data() {
        assert_eq!(
            tagged_offset(BASE, 1, BASE, 0).map(|_| ()),
            Err(DdpError::BaseBounds)
        );
    }

    #[test]
    fn untagged_ok() {
        assert_eq!(check_untagged(1, 1, 0, 100, Some(100)), Ok(()));
        assert_eq!(check_untagged(7, 7, 50, 50, Some(100)), Ok(()));
        assert_eq!(check_untagged(7, 7, 100, 0, Some(100)), Ok(()));
        assert_eq!(check_untagged(0, 0, 0, 0, Some(0)), Ok(()));
    }

    #[test]
    fn untagged_msn_range_first() {
        assert_eq!(
            check_untagged(2, 1, 0, 10, Some(100)),
            Err(DdpError::MsnRange)
        );
        // Takes priority over every other failure.
        assert_eq!(
            check_untagged(0, 1, 500, 500, None),
            Err(DdpError::MsnRange)
        );
        assert_eq!(
            check_untagged(0, u32::MAX, 0, 0, Some(1)),
            Err(DdpError::MsnRange)
        );
    }

    #[test]
    fn untagged_no_buffer() {
        assert_eq!(check_untagged(5, 5, 0, 10, None), Err(DdpError::NoBuffer));
        assert_eq!(check_untagged(5, 5, 0, 0, None), Err(DdpError::NoBuffer));
        assert_eq!(
            check_untagged(5, 5, 999, 999, None),
            Err(DdpError::NoBuffer)
        );
    }

    #[test]
    fn untagged_invalid_mo() {
        assert_eq!(
            check_untagged(1, 1, 101, 0, Some(100)),
            Err(DdpError::InvalidMo)
        );
        assert_eq!(
            check_untagged(1, 1, u32::MAX, u32::MAX, Some(100)),
            Err(DdpError::InvalidMo)
        );
    }

    #[test]
    fn untagged_too_long() {
        assert_eq!(
            check_untagged(1, 1, 0, 101, Some(100)),
            Err(DdpError::TooLong)
        );
        assert_eq!(
            check_untagged(1, 1, 100, 1, Some(100)),
            Err(DdpError::TooLong)
        );
        assert_eq!(
            check_untagged(1, 1, 99, 2, Some(100)),
            Err(DdpError::TooLong)
        );
        // No u32 overflow: mo + len = 2^33 - 2.
        assert_eq!(
            check_untagged(1, 1, u32::MAX, u32::MAX, Some(u32::MAX)),
            Err(DdpError::TooLong)
        );
    }
}
