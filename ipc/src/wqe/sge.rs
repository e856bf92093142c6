//! A gather or scatter entry, 16 octets, little-endian: the gather list in a send queue
//! entry's body and the scatter list of a receive queue entry are arrays of these.
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 4 | STag |
//! | 4 | 4 | length |
//! | 8 | 8 | tagged offset |

use rdmap::{STag, Sge, Sgl};

use crate::layout::{read_u32, read_u64, write_u32, write_u64};

mod field {
    use crate::layout::Field;

    pub(crate) const STAG: Field = 0..4;
    pub(crate) const LEN: Field = 4..8;
    pub(crate) const TO: Field = 8..16;
}

/// Octets of one entry.
pub(super) const SGE_LEN: usize = field::TO.end;

/// Writes `sges` into `area`, one after the other from its first octet. The caller has
/// checked that they fit.
pub(super) fn put_sges(area: &mut [u8], sges: &[Sge]) {
    debug_assert!(sges.len() * SGE_LEN <= area.len(), "the entries fit");
    for (e, s) in area.chunks_exact_mut(SGE_LEN).zip(sges) {
        write_u32(e, field::STAG, s.stag.to_u32());
        write_u32(e, field::LEN, s.len);
        write_u64(e, field::TO, s.to);
    }
}

/// The first `n` entries of `area`. The caller has checked that `n` entries fit.
pub(super) fn get_sges(area: &[u8], n: usize) -> Sgl {
    debug_assert!(n * SGE_LEN <= area.len(), "the entries fit");
    area.chunks_exact(SGE_LEN)
        .take(n)
        .map(|e| Sge {
            stag: STag::from_u32(read_u32(e, field::STAG)),
            len: read_u32(e, field::LEN),
            to: read_u64(e, field::TO),
        })
        .collect()
}
