//! What requests and replies say about a queue pair: the depths its client asks for,
//! a setting it changes, and what a connected one is.

use bytes::{BufMut, Bytes, BytesMut};

use super::MAX_PRIVATE_DATA;
use crate::codec::{Malformed, Reader, put_blob};
use crate::qpseg::Geometry;

/// The depths a queue pair's client asks for: the daemon makes its rings at least this
/// deep (a power of two) and refuses more than [`DeviceAttrs`](super::DeviceAttrs) allows. On the wire two
/// u32, the send queue's first.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send requests outstanding at once.
    pub sq: u32,
    /// Receives outstanding at once.
    pub rq: u32,
}

impl QueueDepths {
    pub(super) fn put(&self, out: &mut BytesMut) {
        out.put_u32_le(self.sq);
        out.put_u32_le(self.rq);
    }

    pub(super) fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(Self {
            sq: r.u32("send queue depth")?,
            rq: r.u32("receive queue depth")?,
        })
    }
}

/// One setting of a queue pair that [`Request::ModifyQp`](super::Request::ModifyQp) changes. On the wire: a setting
/// octet and a value octet (`1 v` incoming RDMA served, `2 v` drain on local failure,
/// `3 0` resume the send queue; `v` is 0 or 1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum QpChange {
    /// Serve (`true`) or refuse the peer's RDMA (seed 004).
    IncomingRdma(bool),
    /// A local failure drains the send queue (`true`) or ends the connection (seed 001).
    DrainOnLocalFailure(bool),
    /// Leave the drained send queue state.
    ResumeSendQueue,
}

impl QpChange {
    pub(super) fn encode(self) -> (u8, u8) {
        match self {
            Self::IncomingRdma(on) => (1, u8::from(on)),
            Self::DrainOnLocalFailure(on) => (2, u8::from(on)),
            Self::ResumeSendQueue => (3, 0),
        }
    }

    pub(super) fn decode(what: u8, value: u8) -> Result<Self, Malformed> {
        let on = match value {
            0 => false,
            1 => true,
            _ => return Err(Malformed("queue pair setting value")),
        };
        match what {
            1 => Ok(Self::IncomingRdma(on)),
            2 => Ok(Self::DrainOnLocalFailure(on)),
            3 if !on => Ok(Self::ResumeSendQueue),
            _ => Err(Malformed("queue pair setting")),
        }
    }
}

/// What a connected queue pair is, sent with its segment and doorbells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The client's handle for it in later requests.
    pub qp: u32,
    /// The engine's queue pair number.
    pub num: u32,
    /// Negotiated inbound Read/Atomic limit.
    pub ird: u16,
    /// Negotiated outbound limit.
    pub ord: u16,
    /// Octets in one FPDU (DDP header and payload).
    pub mulpdu: u16,
    /// This stack's extensions both sides agreed to ([`rdmap::Extensions`] bits).
    pub extensions: u32,
    /// The peer's private data.
    pub private: Bytes,
    /// The segment's geometry.
    pub geometry: Geometry,
    /// CRC and markers in force. On the wire one octet after the private data (bit 0
    /// CRC, bit 1 markers sent, bit 2 markers received); a daemon from before it sends
    /// none, read as all off.
    pub framing: rdmap::Framing,
}

impl QpInfo {
    /// The fields in the reply's order.
    pub(super) fn put(&self, out: &mut BytesMut) {
        out.put_u32_le(self.qp);
        out.put_u32_le(self.num);
        out.put_u16_le(self.ird);
        out.put_u16_le(self.ord);
        out.put_u16_le(self.mulpdu);
        out.put_u32_le(self.extensions);
        self.geometry.put(out);
        put_blob(out, &self.private);
        let f = self.framing;
        out.put_u8(u8::from(f.crc) | u8::from(f.markers_tx) << 1 | u8::from(f.markers_rx) << 2);
    }

    /// What [`put`](Self::put) wrote; a missing framing octet reads as all off.
    pub(super) fn read(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(Self {
            qp: r.u32("qp")?,
            num: r.u32("num")?,
            ird: r.u16("ird")?,
            ord: r.u16("ord")?,
            mulpdu: r.u16("mulpdu")?,
            extensions: r.u32("extensions")?,
            geometry: Geometry::read(r)?,
            private: r.blob(MAX_PRIVATE_DATA, "private data")?,
            framing: {
                let bits = if r.is_empty() { 0 } else { r.u8("framing")? };
                rdmap::Framing {
                    crc: bits & 1 != 0,
                    markers_tx: bits & 2 != 0,
                    markers_rx: bits & 4 != 0,
                }
            },
        })
    }
}
