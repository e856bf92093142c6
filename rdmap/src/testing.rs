//! Test support: a [`Memory`] over plain vectors, a seeded byte pipe, and a hand-made
//! Send FPDU ([`send_fpdu`]).
//!
//! Used by this crate's tests, by the cross-crate tests and by the fuzz targets. It keeps
//! the same check order as a real TPT: valid entry and tag instance, association, bounds,
//! rights.

use std::collections::HashMap;

use ddp::{Access, STag};

use crate::memory::{AccessError, LocalOps, Memory};
use crate::work::{Bind, FastReg};

/// One registered region of a [`VecMemory`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The full STag (index and instance) that names it.
    pub stag: STag,
    /// Tagged offset of the first octet (a virtual address, or 0 for zero-based).
    pub base: u64,
    /// The octets.
    pub data: Vec<u8>,
    /// Rights granted.
    pub access: Access,
    /// False once invalidated.
    pub valid: bool,
    /// False to simulate an STag of another protection domain or queue pair.
    pub associated: bool,
}

/// A [`Memory`] made of vectors, keyed by STag index.
#[derive(Clone, Debug, Default)]
pub struct VecMemory {
    regions: HashMap<u32, Region>,
    /// STags passed to [`Memory::message_placed`], in order.
    pub placed: Vec<STag>,
    /// STags whose registration is queued and not done
    /// ([`LocalOps::registration_pending`]).
    pub pending: Vec<STag>,
}

impl VecMemory {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `len` octets filled with `fill` at tagged offset `base` under `stag`.
    pub fn register(&mut self, stag: STag, base: u64, len: usize, fill: u8, access: Access) {
        self.regions.insert(
            stag.index(),
            Region {
                stag,
                base,
                data: vec![fill; len],
                access,
                valid: true,
                associated: true,
            },
        );
    }

    /// The region registered under `stag`'s index.
    pub fn region(&self, stag: STag) -> Option<&Region> {
        self.regions.get(&stag.index())
    }

    /// Mutable access to the region registered under `stag`'s index.
    pub fn region_mut(&mut self, stag: STag) -> Option<&mut Region> {
        self.regions.get_mut(&stag.index())
    }

    /// The octets of the region registered under `stag`'s index.
    pub fn bytes(&self, stag: STag) -> &[u8] {
        self.region(stag).map_or(&[], |r| &r.data)
    }

    /// A cheap fingerprint of every region's content, to prove memory was not written.
    pub fn checksum(&self) -> u64 {
        let mut keys: Vec<_> = self.regions.keys().copied().collect();
        keys.sort_unstable();
        keys.iter().fold(0xcbf2_9ce4_8422_2325, |mut h, k| {
            for &b in &self.regions[k].data {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            h
        })
    }

    fn lookup(
        &self,
        stag: STag,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(u32, usize), AccessError> {
        let r = self
            .regions
            .get(&stag.index())
            .filter(|r| r.valid && r.stag == stag)
            .ok_or(AccessError::InvalidStag)?;
        if !r.associated {
            return Err(AccessError::NotAssociated);
        }
        let off =
            ddp::tagged_offset(to, len, r.base, r.data.len() as u64).map_err(AccessError::range)?;
        if !r.access.contains(access) {
            return Err(AccessError::Rights {
                missing: Access::from_bits_truncate(access.bits() & !r.access.bits()),
            });
        }
        Ok((stag.index(), off as usize))
    }
}

impl Memory for VecMemory {
    fn check(&self, stag: STag, to: u64, len: u32, access: Access) -> Result<(), AccessError> {
        self.lookup(stag, to, len.into(), access).map(|_| ())
    }

    fn write(
        &mut self,
        stag: STag,
        to: u64,
        data: &[u8],
        access: Access,
    ) -> Result<(), AccessError> {
        let (k, off) = self.lookup(stag, to, data.len() as u64, access)?;
        let r = self.regions.get_mut(&k).ok_or(AccessError::InvalidStag)?;
        r.data[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn read(
        &mut self,
        stag: STag,
        to: u64,
        dst: &mut [u8],
        access: Access,
    ) -> Result<(), AccessError> {
        let (k, off) = self.lookup(stag, to, dst.len() as u64, access)?;
        dst.copy_from_slice(&self.regions[&k].data[off..off + dst.len()]);
        Ok(())
    }

    fn atomic(
        &mut self,
        stag: STag,
        to: u64,
        op: &mut dyn FnMut(u64) -> u64,
    ) -> Result<u64, AccessError> {
        let (k, off) = self.lookup(stag, to, 8, Access::REMOTE_ATOMIC)?;
        let r = self.regions.get_mut(&k).ok_or(AccessError::InvalidStag)?;
        let word: &mut [u8] = &mut r.data[off..off + 8];
        let orig = u64::from_le_bytes(word.try_into().map_err(|_| AccessError::Bounds)?);
        word.copy_from_slice(&op(orig).to_le_bytes());
        Ok(orig)
    }

    fn invalidate(&mut self, stag: STag) -> Result<(), AccessError> {
        let r = self
            .regions
            .get_mut(&stag.index())
            .filter(|r| r.valid && r.stag == stag)
            .ok_or(AccessError::InvalidStag)?;
        if !r.associated {
            return Err(AccessError::NotAssociated);
        }
        r.valid = false;
        Ok(())
    }

    fn message_placed(&mut self, stag: STag) {
        self.placed.push(stag);
    }
}

impl LocalOps for VecMemory {
    fn local_invalidate(&mut self, stag: STag) -> Result<(), AccessError> {
        self.invalidate(stag)
    }

    fn fast_register(&mut self, fr: &FastReg) -> Result<(), AccessError> {
        let r = self
            .regions
            .get_mut(&fr.stag.index())
            .ok_or(AccessError::InvalidStag)?;
        if fr.len > r.data.len() as u64 {
            return Err(AccessError::Bounds);
        }
        r.stag = fr.stag;
        r.base = fr.to;
        r.data.truncate(fr.len as usize);
        r.access = fr.access;
        r.valid = true;
        Ok(())
    }

    /// Windows alias region storage, which plain vectors cannot express.
    fn bind(&mut self, _bind: &Bind) -> Result<(), AccessError> {
        Err(AccessError::InvalidStag)
    }

    fn registration_pending(&self, stag: STag) -> bool {
        self.pending.contains(&stag)
    }
}

/// A tiny deterministic xorshift generator, so seeded tests need no `rand` dependency.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from a seed (0 is replaced by a fixed non-zero value).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % ((hi - lo) as u64 + 1)) as usize
    }

    /// `len` random octets.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// Appends the FPDU of a one-segment Send of `data` with MSN `msn` on queue 0, framed by
/// `framer` (what a peer that is not this stack would put on the wire).
pub fn send_fpdu(framer: &mut mpa::Framer, msn: u32, data: &[u8], out: &mut bytes::BytesMut) {
    let header = ddp::SegmentRepr::Untagged(ddp::UntaggedRepr {
        last: true,
        rsvd_ulp: crate::wire::RdmapControl::new(crate::wire::Opcode::Send).emit(),
        rsvd_ulp_ext: 0,
        qn: 0,
        msn,
        mo: 0,
    });
    let mut hbuf = vec![0; header.header_len()];
    header.emit(&mut hbuf);
    framer.encode(&hbuf, data, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same range check as the TPT (ddp's): an access whose last octet is at TO
    /// 2^64 - 1 is inside a region that ends there, one octet more wraps.
    #[test]
    fn bounds_are_ddps_up_to_the_top_of_the_to_space() {
        let mut m = VecMemory::new();
        let stag = STag::new(1, 1);
        m.register(stag, u64::MAX - 15, 16, 7, Access::REMOTE_READ);
        let mut two = [0u8; 2];
        assert_eq!(
            m.read(stag, u64::MAX - 1, &mut two, Access::REMOTE_READ),
            Ok(())
        );
        let mut three = [0u8; 3];
        assert_eq!(
            m.read(stag, u64::MAX - 1, &mut three, Access::REMOTE_READ),
            Err(AccessError::ToWrap)
        );
        assert_eq!(
            m.read(stag, u64::MAX - 16, &mut two, Access::REMOTE_READ),
            Err(AccessError::Bounds)
        );
    }
}
