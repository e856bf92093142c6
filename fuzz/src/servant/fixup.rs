//! The fix-ups: the bits of an operation's `fix` octet that steer a fuzzed send or receive
//! entry at the client's registered region, the peer's region and the staging area, so
//! that requests get past decoding (see the module documentation of `servant`).

use ipc::qpseg::{RQE_SIZE, SQE_SIZE};
use ipc::wqe::INLINE_MAX;

use super::{Harness, LOCAL};

impl Harness {
    /// Steers a send entry by the bits of `fix` (see the module documentation).
    pub(super) fn fix_sqe(&self, e: &mut [u8; SQE_SIZE], fix: u8) {
        let (peer, local) = (self.peer.fuzz_region, self.fuzz.stag);
        if fix & 1 != 0 {
            e[0] %= 13;
            e[1] &= 0x6f;
            e[2] %= 4;
            e[3] %= 11;
        }
        if e[0] == 10 {
            // A Delay of at most a millisecond: a longer one holds the queue pair, and its
            // DestroyQp, for up to the daemon's 5 s, and the fuzzer soon makes them the
            // rule. (Octets written anywhere, op 6, can still make a long one.)
            let ns = get64(e, 40) % (1 << 20);
            e[40..48].copy_from_slice(&ns.to_le_bytes());
        }
        if fix & 2 != 0 {
            le32(e, 16, peer.stag.to_u32());
            let to = get64(e, 24) % u64::from(peer.len);
            e[24..32].copy_from_slice(&to.to_le_bytes());
            map32(e, 32, |v| v % 4097);
        }
        if fix & 4 != 0 {
            for i in 0..usize::from(e[3]).clamp(1, 10) {
                let at = 96 + 16 * i;
                le32(e, at, local);
                map32(e, at + 4, |v| v % 4097);
                let to = get64(e, at + 8) % u64::from(LOCAL);
                e[at + 8..at + 16].copy_from_slice(&to.to_le_bytes());
            }
        }
        if fix & 8 != 0 {
            let staging = self.qp().geo.staging;
            match e[2] {
                1 => map32(e, 4, |v| v % (INLINE_MAX as u32 + 1)),
                3 => {
                    let len = get32(e, 4) % 8193;
                    le32(e, 4, len);
                    map32(e, 72, |v| v % (staging - len + 1));
                }
                _ => {}
            }
        }
        if fix & 16 != 0 {
            e[1] |= 1;
        }
        if fix & 32 != 0 {
            le32(e, 20, local);
        }
        if fix & 64 != 0 {
            e[1] |= 0x10;
        }
    }

    /// Steers a receive entry: bit 0 a count that decodes, bit 1 scatter entries in the
    /// client's region.
    pub(super) fn fix_rqe(&self, e: &mut [u8; RQE_SIZE], fix: u8) {
        if fix & 1 != 0 {
            e[8] %= 16;
            e[9..16].fill(0);
        }
        if fix & 2 != 0 {
            for i in 0..usize::from(e[8]).min(15) {
                let at = 16 + 16 * i;
                le32(e, at, self.fuzz.stag);
                map32(e, at + 4, |v| v % 4097);
                let to = get64(e, at + 8) % u64::from(LOCAL);
                e[at + 8..at + 16].copy_from_slice(&to.to_le_bytes());
            }
        }
    }
}

/// Writes `v` little-endian at `at` of entry `e`.
pub(super) fn le32(e: &mut [u8], at: usize, v: u32) {
    e[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Replaces the little-endian word at `at` of entry `e` by `f` of it.
pub(super) fn map32(e: &mut [u8], at: usize, f: impl Fn(u32) -> u32) {
    let v = f(get32(e, at));
    le32(e, at, v);
}

/// The little-endian word at `at` of entry `e`.
pub(super) fn get32(e: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]])
}

/// The little-endian double word at `at` of entry `e`.
pub(super) fn get64(e: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&e[at..at + 8]);
    u64::from_le_bytes(b)
}
