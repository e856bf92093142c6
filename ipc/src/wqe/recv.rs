//! Receive queue entries: [`RQE_SIZE`] octets, little-endian, written by the library into
//! a queue pair's receive queue or a shared receive queue, and read by the daemon.
//!
//! The layout is drawn on [`encode_rqe`]; its fields are named in [`field`].

use rdmap::RecvWr;

use super::sge::{SGE_LEN, get_sges, put_sges};
use super::{EncodeError, RQE_SIZE};
use crate::codec::Malformed;
use crate::layout::{read_u64, write_u64};

mod field {
    use super::RQE_SIZE;
    use crate::layout::Field;

    pub(crate) const WR_ID: Field = 0..8;
    pub(crate) const SGE_COUNT: usize = 8;
    pub(crate) const SGES: Field = 16..RQE_SIZE;
}

/// The most scatter entries of a receive queue entry.
pub const RQ_SGES: usize = (field::SGES.end - field::SGES.start) / SGE_LEN;

/// Encodes a receive work request, [`RQE_SIZE`] octets, little-endian:
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 8 | work request id |
/// | 8 | 1 | scatter entries (at most [`RQ_SGES`]) |
/// | 9 | 7 | zero |
/// | 16 | 240 | scatter entries of 16 octets: STag u32, length u32, tagged offset u64 |
pub fn encode_rqe(wr: &RecvWr) -> Result<[u8; RQE_SIZE], EncodeError> {
    if wr.sgl.len() > RQ_SGES {
        return Err(EncodeError::TooManyEntries { max: RQ_SGES });
    }
    let mut e = [0u8; RQE_SIZE];
    write_u64(&mut e, field::WR_ID, wr.wr_id);
    e[field::SGE_COUNT] = wr.sgl.len() as u8;
    put_sges(&mut e[field::SGES], &wr.sgl);
    Ok(e)
}

/// Decodes a receive queue entry copied out of the ring.
pub fn decode_rqe(e: &[u8; RQE_SIZE]) -> Result<RecvWr, Malformed> {
    let n = usize::from(e[field::SGE_COUNT]);
    if n > RQ_SGES {
        return Err(Malformed("receive entry count"));
    }
    Ok(RecvWr {
        wr_id: read_u64(e, field::WR_ID),
        sgl: get_sges(&e[field::SGES], n),
    })
}

#[cfg(test)]
mod tests {
    use rdmap::{STag, Sge};

    use super::*;

    #[test]
    fn a_receive_entry_is_laid_out_as_documented() {
        let wr = RecvWr {
            wr_id: 0x0102_0304_0506_0708,
            sgl: [
                Sge {
                    stag: STag::from_u32(0x0a0b_0c0d),
                    to: 0x1112_1314_1516_1718,
                    len: 0x0200,
                },
                Sge {
                    stag: STag::from_u32(0x21),
                    to: 0,
                    len: 1,
                },
            ]
            .into(),
        };
        let e = encode_rqe(&wr).unwrap();
        #[rustfmt::skip]
        let want: &[u8] = &[
            8, 7, 6, 5, 4, 3, 2, 1,
            2, 0, 0, 0, 0, 0, 0, 0,
            0x0d, 0x0c, 0x0b, 0x0a,  0, 0x02, 0, 0,
            0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
            0x21, 0, 0, 0,  1, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(&e[..48], want);
        assert!(e[48..].iter().all(|&b| b == 0));
        assert_eq!(RQ_SGES, 15);
        assert_eq!(decode_rqe(&e).unwrap(), wr);
    }
}
