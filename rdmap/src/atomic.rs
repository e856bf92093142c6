//! RFC 7306 §5 atomic arithmetic (wire-format.md §4.10), as pure functions.
//!
//! The responder reads the 64-bit target, computes the new value with [`apply`], writes it
//! back and returns the original value in the Atomic Response. Alignment (8 octets), STag
//! and access checks belong to the caller; a misaligned target must not touch memory and
//! is answered with [`TermCode::CATASTROPHIC_STREAM`](crate::term::TermCode::CATASTROPHIC_STREAM).

use crate::wire::{AtomicOp, AtomicRequestRepr};

/// Masked multi-field Fetch and Add: the new value to store.
///
/// Each set bit of `add_mask` marks the most significant bit of an independent addition
/// field; the carry out of that bit is dropped. `add_mask == 0` is one plain wrapping
/// 64-bit add. Per bit `b` this is
/// `sum = carry + orig[b] + add[b]; new[b] = sum & 1; carry = (sum >> 1) & !mask[b]`,
/// computed here word-wise: adding with the field-top bits cleared cannot carry across a
/// field boundary, and the top bits are then the XOR of the operands and the carry in.
pub fn fetch_add(orig: u64, add: u64, add_mask: u64) -> u64 {
    let low = (orig & !add_mask).wrapping_add(add & !add_mask);
    low ^ ((orig ^ add) & add_mask)
}

/// Masked Compare and Swap: the new value to store.
///
/// If `orig` equals `compare` in every bit of `compare_mask`, the bits of `swap_mask` are
/// taken from `swap` and the others kept; otherwise `orig` is unchanged. Unmasked CmpSwap
/// uses all-ones for both masks.
pub fn cmp_swap(orig: u64, swap: u64, swap_mask: u64, compare: u64, compare_mask: u64) -> u64 {
    if (compare ^ orig) & compare_mask == 0 {
        (orig & !swap_mask) | (swap & swap_mask)
    } else {
        orig
    }
}

/// The value to store for `req` applied to the target's current value `orig`, or `None`
/// for an unknown AOpCode (which the responder rejects without touching memory). The
/// Atomic Response always carries `orig`.
pub fn apply(req: &AtomicRequestRepr, orig: u64) -> Option<u64> {
    match req.op {
        AtomicOp::FetchAdd => Some(fetch_add(orig, req.add_or_swap, req.add_or_swap_mask)),
        AtomicOp::CmpSwap => Some(cmp_swap(
            orig,
            req.add_or_swap,
            req.add_or_swap_mask,
            req.compare,
            req.compare_mask,
        )),
        AtomicOp::Unknown(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddp::STag;
    use proptest::prelude::*;

    /// The bit-serial definition of wire-format.md §4.10.
    fn fetch_add_bitwise(orig: u64, add: u64, mask: u64) -> u64 {
        let mut carry = 0u64;
        let mut new = 0u64;
        for b in 0..64 {
            let sum = carry + ((orig >> b) & 1) + ((add >> b) & 1);
            new |= (sum & 1) << b;
            carry = (sum >> 1) & !((mask >> b) & 1);
        }
        new
    }

    #[test]
    fn plain_add_wraps() {
        assert_eq!(fetch_add(5, 1, 0), 6);
        assert_eq!(fetch_add(u64::MAX, 2, 0), 1);
        assert_eq!(
            fetch_add(0x8000_0000_0000_0000, 0x8000_0000_0000_0000, 0),
            0
        );
    }

    #[test]
    fn two_32_bit_fields() {
        // Field tops at bits 31 and 63: two independent 32-bit counters.
        let mask = 0x8000_0000_8000_0000;
        let orig = 0x0000_0001_ffff_ffff;
        let add = 0x0000_0001_0000_0001;
        // Low field: 0xffffffff + 1 = 0, carry dropped; high field: 1 + 1 = 2.
        assert_eq!(fetch_add(orig, add, mask), 0x0000_0002_0000_0000);
        // Without the mask the carry crosses into the high half.
        assert_eq!(fetch_add(orig, add, 0), 0x0000_0003_0000_0000);
        // High field overflow is dropped too.
        assert_eq!(
            fetch_add(0xffff_ffff_0000_0005, 0x0000_0001_0000_0003, mask),
            8
        );
    }

    #[test]
    fn eight_byte_fields() {
        // Top bit of every octet: eight independent 8-bit adds.
        let mask = 0x8080_8080_8080_8080;
        assert_eq!(
            fetch_add(0xff01_ff01_ff01_ff01, 0x0101_0101_0101_0101, mask),
            0x0002_0002_0002_0002
        );
    }

    #[test]
    fn cmp_swap_match_mismatch_masked() {
        let all = u64::MAX;
        // Match: swapped.
        assert_eq!(cmp_swap(0x2222, 0x1111, all, 0x2222, all), 0x1111);
        // Mismatch: unchanged.
        assert_eq!(cmp_swap(0x2223, 0x1111, all, 0x2222, all), 0x2223);
        // Compare only the low octet: matches although the high octets differ.
        assert_eq!(cmp_swap(0xab22, 0x1111, all, 0xcd22, 0xff), 0x1111);
        // Swap only the high octet.
        assert_eq!(cmp_swap(0xab22, 0x11_1111, 0xff00, 0xab22, all), 0x1122);
        // Empty compare mask always matches; empty swap mask never changes anything.
        assert_eq!(cmp_swap(7, 9, all, 1, 0), 9);
        assert_eq!(cmp_swap(7, 9, 0, 7, all), 7);
    }

    #[test]
    fn apply_dispatches_on_the_op() {
        let stag = STag::from_u32(0xaabb_ccdd);
        // §5.4 FetchAdd of 1 and CmpSwap 0x2222… -> 0x1111….
        assert_eq!(
            apply(&AtomicRequestRepr::fetch_add(1, stag, 0x40, 1), 5),
            Some(6)
        );
        let cs = AtomicRequestRepr::cmp_swap(
            2,
            stag,
            0x48,
            0x2222_2222_2222_2222,
            0x1111_1111_1111_1111,
        );
        assert_eq!(
            apply(&cs, 0x2222_2222_2222_2222),
            Some(0x1111_1111_1111_1111)
        );
        assert_eq!(apply(&cs, 3), Some(3));
        let unknown = AtomicRequestRepr {
            op: AtomicOp::Unknown(1),
            ..cs
        };
        assert_eq!(apply(&unknown, 0x2222_2222_2222_2222), None);
    }

    proptest! {
        #[test]
        fn fetch_add_matches_the_bitwise_definition(orig: u64, add: u64, mask: u64) {
            prop_assert_eq!(fetch_add(orig, add, mask), fetch_add_bitwise(orig, add, mask));
        }

        #[test]
        fn cmp_swap_properties(orig: u64, swap: u64, sm: u64, cmp: u64, cm: u64) {
            let new = cmp_swap(orig, swap, sm, cmp, cm);
            // Bits outside the swap mask never change.
            prop_assert_eq!(new & !sm, orig & !sm);
            if (orig ^ cmp) & cm == 0 {
                prop_assert_eq!(new & sm, swap & sm);
            } else {
                prop_assert_eq!(new, orig);
            }
        }
    }
}
