//! Direct placement ([`Stream::direct_target`]): a large RDMA Write payload read straight
//! into memory, driven octet by octet as a driver would, and the cases that must stay on
//! the ordinary path.

use std::sync::Arc;

use bytes::BytesMut;
use ddp::{Access, STag};
use mpa::MpaConfig;
use shm::Region;

use super::pair::Pair;
use super::{RW, pattern, recv, send, stag, write};
use crate::memory::{AccessError, Memory};
use crate::testing::VecMemory;
use crate::{QpState, RemoteBuf, StreamConfig, Transmit};

/// One shared-memory region under one STag, at tagged offset 0; [`VecMemory`] runs the
/// checks (its own octets are unused).
struct OneRegion {
    checks: VecMemory,
    region: Arc<Region>,
}

impl OneRegion {
    fn new(len: usize, access: Access) -> Self {
        let mut checks = VecMemory::new();
        checks.register(stag(7), 0, len, 0, access);
        Self {
            checks,
            region: Arc::new(Region::alloc(len).unwrap()),
        }
    }

    fn locate(
        &self,
        stag: STag,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<usize, AccessError> {
        let len = u32::try_from(len).map_err(|_| AccessError::Bounds)?;
        self.checks.check(stag, to, len, access)?;
        Ok(to as usize)
    }
}

impl Memory for OneRegion {
    fn check(&self, stag: STag, to: u64, len: u32, access: Access) -> Result<(), AccessError> {
        self.locate(stag, to, len as usize, access).map(|_| ())
    }

    fn write(
        &mut self,
        stag: STag,
        to: u64,
        data: &[u8],
        access: Access,
    ) -> Result<(), AccessError> {
        let off = self.locate(stag, to, data.len(), access)?;
        self.region
            .write_at(off, data)
            .map_err(|_| AccessError::Bounds)
    }

    fn read(
        &mut self,
        stag: STag,
        to: u64,
        dst: &mut [u8],
        access: Access,
    ) -> Result<(), AccessError> {
        let off = self.locate(stag, to, dst.len(), access)?;
        self.region
            .read_at(off, dst)
            .map_err(|_| AccessError::Bounds)
    }

    fn in_place(
        &mut self,
        stag: STag,
        to: u64,
        len: usize,
        access: Access,
    ) -> Result<Option<(Arc<Region>, usize)>, AccessError> {
        let off = self.locate(stag, to, len, access)?;
        Ok(Some((self.region.clone(), off)))
    }

    fn atomic(
        &mut self,
        _: STag,
        _: u64,
        _: &mut dyn FnMut(u64) -> u64,
    ) -> Result<u64, AccessError> {
        Err(AccessError::InvalidStag)
    }

    fn invalidate(&mut self, _: STag) -> Result<(), AccessError> {
        Err(AccessError::InvalidStag)
    }
}

/// A connection with CRC `crc`, MULPDU 16 KiB. A (the initiator) sends a Send (the
/// first FPDU, which starts the responder), an RDMA Write of `data` to B's region at 100
/// and a Send after it. Returns the pair, B's memory with two receives posted into it, and
/// A's octets.
fn write_between_sends(crc: bool, data: &[u8], access: Access) -> (Pair, OneRegion, BytesMut) {
    let mut cfg = MpaConfig::default();
    cfg.crc = crc;
    let sc = StreamConfig {
        mulpdu: 16 * 1024,
        ..StreamConfig::default()
    };
    let mut p = Pair::connect(cfg.clone(), cfg, sc, 1);
    let mem = OneRegion::new(64 * 1024, access);
    for (wr_id, to) in [(1, 60_000), (2, 61_000)] {
        p.b.s.post_recv(recv(wr_id, stag(7), to, 64)).unwrap();
    }
    let dst = RemoteBuf {
        stag: stag(7),
        to: 100,
        len: data.len() as u32,
    };
    p.a.s.post_send(send(1, b"first")).unwrap();
    p.a.s.post_send(write(2, data, dst)).unwrap();
    p.a.s.post_send(send(3, b"after")).unwrap();
    let mut out = Transmit::new();
    let n = p.a.s.poll_transmit(&mut p.a.mem, &mut out, usize::MAX);
    p.a.s.handle_written(n);
    (p, mem, BytesMut::from(&out.take(n)[..]))
}

fn region_holds(mem: &OneRegion, at: usize, data: &[u8]) -> bool {
    mem.region.view(at, data.len()).unwrap()[..] == data[..]
}

#[test]
fn a_large_write_is_read_into_memory_and_then_takes_effect_in_order() {
    let data = pattern(40_000, 3);
    let (mut p, mut mem, wire) = write_between_sends(false, &data, RW);
    let mut fed = 0;
    let mut src = BytesMut::new();
    let mut direct = 0;
    let mut recvs = 0;
    // Feed 1000 octets at a time; whenever the stream names a target, "read" up to 3000
    // octets there instead, as the socket would deliver them.
    while fed < wire.len() {
        if let Some(t) = p.b.s.direct_target(&mut src, &mut mem) {
            assert!(src.is_empty(), "the segment's octets left the input");
            assert!(Arc::ptr_eq(&t.region, &mem.region));
            let n = t.len.min(3000).min(wire.len() - fed);
            t.region.write_at(t.offset, &wire[fed..fed + n]).unwrap();
            p.b.s.handle_direct(n);
            fed += n;
            direct += n;
        } else {
            let n = 1000.min(wire.len() - fed);
            src.extend_from_slice(&wire[fed..fed + n]);
            fed += n;
        }
        p.b.s.handle_input(&mut src, &mut mem);
        for ev in std::iter::from_fn(|| p.b.s.poll_event()) {
            if let crate::Event::Completion(wc) = ev {
                recvs += 1;
                if wc.wr_id == 2 {
                    // The Send behind the Write completes only once the Write is placed.
                    assert_eq!(fed, wire.len(), "the Send completed before the Write");
                    assert!(region_holds(&mem, 100, &data), "the Write is all placed");
                }
            }
        }
    }
    assert_eq!((p.b.s.state(), recvs), (QpState::Rts, 2));
    assert!(region_holds(&mem, 100, &data));
    assert!(region_holds(&mem, 61_000, b"after"));
    let st = p.b.s.stats();
    assert_eq!(st.bytes_received_in_place, direct as u64);
    assert!(
        direct > 20_000,
        "most of the 40,000 octets went straight to memory: {direct}"
    );
    assert_eq!(st.bytes_placed, 40_000 + 10);
    // The two Sends and three 16 KiB segments of the Write.
    assert_eq!(st.fpdus_received, 5);
}

#[test]
fn with_crc_or_a_write_that_fails_its_checks_the_ordinary_path_decides() {
    let data = pattern(40_000, 4);
    // CRC on: a payload read elsewhere could not be checked.
    let (mut p, mut mem, wire) = write_between_sends(true, &data, RW);
    // The first Send's FPDU (length, header, "first", PAD 3, CRC), then 100 octets.
    let first = 2 + 18 + 5 + 3 + 4 + 100;
    let mut src = BytesMut::from(&wire[..first]);
    p.b.s.handle_input(&mut src, &mut mem);
    assert_eq!(src.len(), 100, "the first Send was consumed");
    assert!(p.b.s.direct_target(&mut src, &mut mem).is_none());
    assert_eq!(src.len(), 100, "the input is left as it was");

    // No remote write right: the whole FPDU is read and answered with the exact Terminate.
    let (mut p, mut mem, wire) =
        write_between_sends(false, &data, RW.difference(Access::REMOTE_WRITE));
    let mut src = BytesMut::from(&wire[..first]);
    p.b.s.handle_input(&mut src, &mut mem);
    assert!(p.b.s.direct_target(&mut src, &mut mem).is_none());
    assert_eq!(src.len(), 100);
    src.extend_from_slice(&wire[first..]);
    p.b.s.handle_input(&mut src, &mut mem);
    assert_eq!(p.b.s.state(), QpState::Terminate);
    assert!(
        mem.region.view(0, 60_000).unwrap().iter().all(|&b| b == 0),
        "nothing placed"
    );

    // Every right, but the queue pair refuses incoming RDMA (seed 004): not read into
    // memory either; the ordinary path answers with the access-rights Terminate.
    let (mut p, mut mem, wire) = write_between_sends(false, &data, RW);
    p.b.s.set_incoming_rdma(false);
    let mut src = BytesMut::from(&wire[..first]);
    p.b.s.handle_input(&mut src, &mut mem);
    assert!(p.b.s.direct_target(&mut src, &mut mem).is_none());
    src.extend_from_slice(&wire[first..]);
    p.b.s.handle_input(&mut src, &mut mem);
    assert_eq!(p.b.s.state(), QpState::Terminate);
    let term = std::iter::from_fn(|| p.b.s.poll_event()).find_map(|e| match e {
        crate::Event::TerminateSent(t) => Some(t.code),
        _ => None,
    });
    assert_eq!(term, Some(crate::TermCode::ACCESS_RIGHTS));
    assert!(
        mem.region.view(0, 60_000).unwrap().iter().all(|&b| b == 0),
        "nothing placed"
    );
}
