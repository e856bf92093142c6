//! A queue pair segment's geometry: the depths of its rings and the size of its staging
//! area, which place everything after the header page, as the daemon sends them in its
//! reply and either side checks them.

use bytes::{BufMut, BytesMut};

use super::{CQE_SIZE, HEADER_LEN, RQE_SIZE, SQE_SIZE};
use crate::codec::{Malformed, Reader};

/// The largest ring depth either side accepts.
pub const MAX_DEPTH: u32 = 1 << 16;
/// The largest staging area either side accepts.
pub const MAX_STAGING: u32 = 64 << 20;

/// Depths of the rings and the size of the staging area.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Send queue entries (a power of two).
    pub sq_depth: u32,
    /// Receive queue entries (a power of two).
    pub rq_depth: u32,
    /// Completion entries (a power of two).
    pub cq_depth: u32,
    /// Staging octets (a multiple of 64).
    pub staging: u32,
}

impl Default for Geometry {
    fn default() -> Self {
        Self {
            sq_depth: 256,
            rq_depth: 256,
            cq_depth: 1024,
            staging: 1 << 20,
        }
    }
}

impl Geometry {
    /// Where the send queue's entries start: after the header page.
    pub(super) fn sq_at(&self) -> usize {
        HEADER_LEN
    }
    /// Where the receive queue's entries start: after the send queue's.
    pub(super) fn rq_at(&self) -> usize {
        self.sq_at() + self.sq_depth as usize * SQE_SIZE
    }
    /// Where the completions start: after the receive queue's entries.
    pub(super) fn cq_at(&self) -> usize {
        self.rq_at() + self.rq_depth as usize * RQE_SIZE
    }
    /// Where the staging area starts: after the completions.
    pub(super) fn staging_at(&self) -> usize {
        self.cq_at() + self.cq_depth as usize * CQE_SIZE
    }
    /// Octets of the whole segment.
    pub fn len(&self) -> usize {
        self.staging_at() + self.staging as usize
    }
    /// Never true.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// On the wire (a queue pair reply): the three depths, then the staging octets, u32
    /// each.
    pub(crate) fn put(&self, out: &mut BytesMut) {
        out.put_u32_le(self.sq_depth);
        out.put_u32_le(self.rq_depth);
        out.put_u32_le(self.cq_depth);
        out.put_u32_le(self.staging);
    }

    /// What [`put`](Self::put) wrote, checked.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let g = Self {
            sq_depth: r.u32("sq depth")?,
            rq_depth: r.u32("rq depth")?,
            cq_depth: r.u32("cq depth")?,
            staging: r.u32("staging")?,
        };
        g.check()?;
        Ok(g)
    }

    /// Checks what either side requires: depths powers of two up to [`MAX_DEPTH`], a
    /// staging area a multiple of 64 octets up to [`MAX_STAGING`].
    pub fn check(&self) -> Result<(), Malformed> {
        let depth_ok = |d: u32| d.is_power_of_two() && d <= MAX_DEPTH;
        if !(depth_ok(self.sq_depth) && depth_ok(self.rq_depth) && depth_ok(self.cq_depth))
            || self.staging > MAX_STAGING
            || !self.staging.is_multiple_of(64)
        {
            return Err(Malformed("ring geometry"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_from_the_other_side_is_checked() {
        let mut out = BytesMut::new();
        Geometry::default().put(&mut out);
        assert_eq!(
            Geometry::read(&mut Reader::new(&out)),
            Ok(Geometry::default())
        );
        for bad in [
            Geometry {
                sq_depth: 3,
                ..Geometry::default()
            },
            Geometry {
                cq_depth: MAX_DEPTH * 2,
                ..Geometry::default()
            },
            Geometry {
                staging: 65,
                ..Geometry::default()
            },
            Geometry {
                rq_depth: 0,
                ..Geometry::default()
            },
        ] {
            let mut out = BytesMut::new();
            bad.put(&mut out);
            assert!(Geometry::read(&mut Reader::new(&out)).is_err(), "{bad:?}");
        }
    }
}
