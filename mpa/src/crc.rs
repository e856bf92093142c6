//! CRC32c (Castagnoli), the MPA FPDU CRC (RFC 5044 §4.1; little-endian on the wire, see
//! the framer).
//!
//! Two well-kept implementations, each where it is fastest (measured on the development
//! VM, an AMD EPYC with SSE 4.2 and PCLMULQDQ): `crc32c`'s three-way `crc32` instruction
//! loop for short inputs (headers, small FPDUs: 5.0 GB/s at 1 KiB against 4.4), and
//! `crc-fast`'s carry-less multiplication folding for long ones, where the CRC is half
//! the CPU time of a 64 KiB RDMA Write (7.3 GB/s at 64 KiB against 5.3).

use crc_fast::{CrcAlgorithm, Digest};

/// Inputs at least this long go to the folding implementation.
const FOLD_MIN: usize = 4096;

/// The CRC32c of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// The CRC32c of the octets that gave `crc` followed by `data`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    if data.len() < FOLD_MIN {
        return crc32c::crc32c_append(crc, data);
    }
    // `crc` is the finished value (inverted); the running state is its complement.
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_implementations_agree_at_every_length_and_split() {
        let data: Vec<u8> = (0..3 * FOLD_MIN as u32)
            .map(|i| (i * 31 + 7) as u8)
            .collect();
        for len in [0, 1, 63, FOLD_MIN - 1, FOLD_MIN, FOLD_MIN + 1, data.len()] {
            assert_eq!(
                crc32c(&data[..len]),
                crc32c::crc32c(&data[..len]),
                "len {len}"
            );
        }
        let whole = crc32c::crc32c(&data);
        for split in [0, 5, FOLD_MIN, data.len() - FOLD_MIN, data.len()] {
            let (a, b) = data.split_at(split);
            assert_eq!(crc32c_append(crc32c(a), b), whole, "split {split}");
        }
    }
}
