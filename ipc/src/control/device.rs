//! A device's limits and settings, what `ibv_query_device` answers (the QUERY_DEVICE
//! reply).

use bytes::{BufMut, BytesMut};

use crate::codec::{Malformed, Reader};

/// A device's limits and settings, in the order of the reply's fields (little-endian).
/// `u32::MAX` in a limit means none but memory.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttrs {
    /// Queue pairs one application may have.
    pub max_qp: u32,
    /// Regions and windows one application may have.
    pub max_mr: u32,
    /// Shared receive queues one application may have.
    pub max_srq: u32,
    /// Send queue depth of a queue pair.
    pub sq_depth: u32,
    /// Receive queue depth of a queue pair.
    pub rq_depth: u32,
    /// Gather entries of a send request.
    pub max_send_sge: u32,
    /// Scatter entries of a receive request.
    pub max_recv_sge: u32,
    /// Inbound RDMA Reads and Atomics outstanding per queue pair (IRD) it offers.
    pub ird: u16,
    /// Outbound ones (ORD) it asks for.
    pub ord: u16,
    /// The largest ULPDU it sends.
    pub mulpdu: u16,
    /// MPA revision it offers.
    pub mpa_revision: u8,
    /// CRC on.
    pub crc: bool,
    /// Markers asked for.
    pub markers: bool,
    /// Extensions it offers (`mpa::Extensions` bits).
    pub extensions: u32,
    /// Slots of a protection domain's push region (0: no push path).
    pub push_slots: u32,
}

impl DeviceAttrs {
    /// What an engine set up with `mpa` and `stream` offers: its queue depths and
    /// protocol settings, no limit but memory on the counts, and no push path. Both
    /// backends start from this (iwarpd narrows the limits to its clients'), so the
    /// settings are read from one place.
    pub fn settings(mpa: &mpa::MpaConfig, stream: &rdmap::StreamConfig) -> Self {
        let limit = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Self {
            max_qp: u32::MAX,
            max_mr: u32::MAX,
            max_srq: u32::MAX,
            sq_depth: limit(stream.sq_depth),
            rq_depth: limit(stream.rq_depth),
            max_send_sge: u32::MAX,
            max_recv_sge: u32::MAX,
            ird: mpa.ird,
            ord: mpa.ord,
            mulpdu: stream.mulpdu,
            mpa_revision: mpa.rev,
            crc: mpa.crc,
            markers: mpa.markers,
            extensions: mpa.extensions.bits(),
            push_slots: 0,
        }
    }

    pub(super) fn put(&self, out: &mut BytesMut) {
        for v in [
            self.max_qp,
            self.max_mr,
            self.max_srq,
            self.sq_depth,
            self.rq_depth,
            self.max_send_sge,
            self.max_recv_sge,
        ] {
            out.put_u32_le(v);
        }
        out.put_u16_le(self.ird);
        out.put_u16_le(self.ord);
        out.put_u16_le(self.mulpdu);
        out.put_u8(self.mpa_revision);
        out.put_u8(u8::from(self.crc) | u8::from(self.markers) << 1);
        out.put_u32_le(self.extensions);
        out.put_u32_le(self.push_slots);
    }

    pub(super) fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let mut a = Self {
            max_qp: r.u32("max_qp")?,
            max_mr: r.u32("max_mr")?,
            max_srq: r.u32("max_srq")?,
            sq_depth: r.u32("sq_depth")?,
            rq_depth: r.u32("rq_depth")?,
            max_send_sge: r.u32("max_send_sge")?,
            max_recv_sge: r.u32("max_recv_sge")?,
            ird: r.u16("ird")?,
            ord: r.u16("ord")?,
            mulpdu: r.u16("mulpdu")?,
            mpa_revision: r.u8("mpa_revision")?,
            ..Self::default()
        };
        let flags = r.u8("flags")?;
        a.crc = flags & 1 != 0;
        a.markers = flags & 2 != 0;
        a.extensions = r.u32("extensions")?;
        a.push_slots = r.u32("push_slots")?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_attrs_are_little_endian_words_then_flags() {
        let a = DeviceAttrs {
            max_qp: 1,
            max_mr: 2,
            max_srq: 3,
            sq_depth: 4,
            rq_depth: 5,
            max_send_sge: 6,
            max_recv_sge: 7,
            ird: 0x0102,
            ord: 0x0304,
            mulpdu: 0x0506,
            mpa_revision: 2,
            crc: true,
            markers: true,
            extensions: 3,
            push_slots: 0x20,
        };
        let mut out = BytesMut::new();
        a.put(&mut out);
        let mut want = Vec::new();
        for v in 1u32..=7 {
            want.extend_from_slice(&v.to_le_bytes());
        }
        want.extend_from_slice(&[0x02, 0x01, 0x04, 0x03, 0x06, 0x05, 2, 0b11]);
        want.extend_from_slice(&[3, 0, 0, 0, 0x20, 0, 0, 0]);
        assert_eq!(&out[..], &want[..]);
        assert_eq!(DeviceAttrs::read(&mut Reader::new(&want)).unwrap(), a);
    }
}
