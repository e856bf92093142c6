//! Counters: a queue pair's (its traffic and its push path) and a device's (the whole
//! daemon's, with the asking client's share), as the QUERY_QP and STATS replies carry
//! them.

use bytes::{BufMut, BytesMut};

use crate::codec::{Malformed, Reader};

/// The counters of a queue pair, or their sum over a device: its traffic (the stream's
/// own [`StreamStats`](rdmap::StreamStats)) and seed 000's push path
/// ([`PushCounters`](crate::qpseg::PushCounters)). One struct for the engine, the control
/// protocol and the library alike. On the wire: 47 little-endian u64s, the traffic's
/// fields then the push path's, in the order of their fields (arrays element by element).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// FPDUs, octets per opcode, octets placed in place, Terminates.
    pub traffic: rdmap::StreamStats,
    /// Requests executed from pushed messages and from the send queue, and discards by
    /// reason.
    pub push: crate::qpseg::PushCounters,
}

/// The RDMAP opcodes counted: 0x0 to 0xF.
pub const OPCODES: usize = rdmap::OPCODES;

impl Counters {
    /// The counters in wire order.
    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        let (t, p) = (&self.traffic, &self.push);
        [
            t.fpdus_sent,
            t.fpdus_received,
            t.bytes_placed,
            t.bytes_sent_in_place,
            t.bytes_received_in_place,
        ]
        .into_iter()
        .chain(t.octets_sent)
        .chain(t.octets_received)
        .chain([
            t.terminates_sent,
            t.terminates_received,
            p.executed,
            p.sq_path,
        ])
        .chain(p.discards)
    }

    pub(super) fn put(&self, out: &mut BytesMut) {
        for w in self.words() {
            out.put_u64_le(w);
        }
    }

    pub(super) fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let mut c = Self::default();
        let (t, p) = (&mut c.traffic, &mut c.push);
        for w in [
            &mut t.fpdus_sent,
            &mut t.fpdus_received,
            &mut t.bytes_placed,
            &mut t.bytes_sent_in_place,
            &mut t.bytes_received_in_place,
        ]
        .into_iter()
        .chain(t.octets_sent.iter_mut())
        .chain(t.octets_received.iter_mut())
        .chain([
            &mut t.terminates_sent,
            &mut t.terminates_received,
            &mut p.executed,
            &mut p.sq_path,
        ])
        .chain(p.discards.iter_mut())
        {
            *w = r.u64("counter")?;
        }
        Ok(c)
    }
}

/// A device's counters (the whole daemon, or an embedded engine), with the asking
/// application's share: the STATS reply, and `verbs::DeviceStats` alike.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// The asking application's queue pairs whose connection is still running or whose
    /// handle is held.
    pub queue_pairs: u32,
    /// The asking application's live entries of the memory table: regions and windows.
    pub memory_entries: u32,
    /// Applications attached now (1 for an embedded engine).
    pub clients: u32,
    /// Queue pairs of every application of the device, now.
    pub device_queue_pairs: u32,
    /// Connections that reached FPDU mode since the device started.
    pub connections: u64,
    /// Of those, the ones closed and released.
    pub connections_closed: u64,
    /// The counters of every queue pair the device has had, live and gone, summed:
    /// FPDUs, octets per opcode, Terminates sent and received, and (through iwarpd) the
    /// push path's executions and discards.
    pub totals: Counters,
}

impl DeviceCounters {
    /// The fields in the STATS reply's order.
    pub(super) fn put(&self, out: &mut BytesMut) {
        out.put_u32_le(self.queue_pairs);
        out.put_u32_le(self.memory_entries);
        out.put_u32_le(self.clients);
        out.put_u32_le(self.device_queue_pairs);
        out.put_u64_le(self.connections);
        out.put_u64_le(self.connections_closed);
        self.totals.put(out);
    }

    pub(super) fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(Self {
            queue_pairs: r.u32("queue pairs")?,
            memory_entries: r.u32("memory entries")?,
            clients: r.u32("clients")?,
            device_queue_pairs: r.u32("queue pairs")?,
            connections: r.u64("connections")?,
            connections_closed: r.u64("connections")?,
            totals: Counters::read(r)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{HEADER_LEN, Reply, func};

    #[test]
    fn counters_are_47_words_in_field_order() {
        let mut c = Counters::default();
        c.traffic.fpdus_sent = 0x0102;
        c.traffic.octets_sent = std::array::from_fn(|i| i as u64);
        c.push.discards = [0, 0, 0, 0, 0, 0x55];
        let m = Reply::QpCounters(c).encode(func::QUERY_QP, 1);
        // After the status (0: success).
        let body = &m[HEADER_LEN + 2..];
        assert_eq!(body.len(), 47 * 8);
        assert_eq!(&body[..8], &[0x02, 0x01, 0, 0, 0, 0, 0, 0]);
        // octets_sent[11] is word 5 + 11.
        assert_eq!(body[16 * 8], 11);
        assert_eq!(body[46 * 8], 0x55);
        let d = Reply::Stats(DeviceCounters::default()).encode(func::STATS, 1);
        assert_eq!(d.len() - HEADER_LEN - 2, 4 * 4 + 2 * 8 + 47 * 8);
    }
}
