//! What the daemon's tests share: a real `iwarpd` process ([`daemon`]) and a hand-made
//! FPDU.
#![allow(dead_code)]

pub(crate) mod daemon;

use bytes::BytesMut;

/// Appends the FPDU of a one-segment Send of `data` with MSN `msn` on queue 0.
pub(crate) fn send_fpdu(framer: &mut mpa::Framer, msn: u32, data: &[u8], out: &mut BytesMut) {
    let header = ddp::SegmentRepr::Untagged(ddp::UntaggedRepr {
        last: true,
        rsvd_ulp: rdmap::wire::RdmapControl::new(rdmap::wire::Opcode::Send).emit(),
        rsvd_ulp_ext: 0,
        qn: 0,
        msn,
        mo: 0,
    });
    let mut hbuf = vec![0; header.header_len()];
    header.emit(&mut hbuf);
    framer.encode(&hbuf, data, out);
}
