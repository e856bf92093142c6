//! Direct placement: with CRC and markers off, the rest of a large RDMA Write payload is
//! read from the socket straight into the target region, with no copy in user space. The
//! segment is validated from its header first, exactly as its whole FPDU would be; a
//! segment that would fail any check is left to the ordinary path, which then sends the
//! exact Terminate.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use ddp::{Access, SegmentRepr, TAGGED_HEADER_LEN, TaggedRepr};
use mpa::wire::fpdu::{CRC_LEN, LENGTH_LEN};
use shm::Region;

use super::Stream;
use super::checks::check_segment;
use crate::memory::Memory;
use crate::term::TermCode;
use crate::wire::Opcode;

/// The least payload still to come for a read straight into memory to be worth its own
/// system call (shorter rests are read with the octets behind them).
const DIRECT_MIN: usize = 8192;

/// Where a driver reads the rest of a payload ([`Stream::direct_target`]).
#[derive(Clone, Debug)]
pub struct DirectTarget {
    /// The region the payload goes to.
    pub region: Arc<Region>,
    /// Offset in `region` of the next payload octet.
    pub offset: usize,
    /// Payload octets still to come.
    pub len: usize,
}

/// An RDMA Write segment whose payload is being read into memory.
#[derive(Debug)]
pub(crate) struct Direct {
    seg: TaggedRepr,
    ulpdu_len: usize,
    region: Arc<Region>,
    /// Offset in `region` of the first payload octet.
    offset: usize,
    len: usize,
    placed: usize,
}

impl Stream {
    /// True while an RDMA Write segment's payload is being read straight into memory
    /// (between [`direct_target`](Self::direct_target) and the last of its octets).
    pub fn placing_directly(&self) -> bool {
        self.rx.direct.is_some()
    }

    /// Where the next octets from the socket should be read, if they belong in memory.
    ///
    /// With CRC and markers off, when `src` (the octets read and not yet consumed) holds
    /// the start of an RDMA Write segment whose header passes every check and at least
    /// 8 KiB of its payload is still to come, the payload octets already in `src` are
    /// placed, the segment leaves `src`, and the rest of its payload is to be read into
    /// the returned target; report the octets read there with
    /// [`handle_direct`](Self::handle_direct). Octets read into `src` instead are placed
    /// by [`handle_input`](Self::handle_input) all the same. `None`: read into `src`.
    pub fn direct_target(
        &mut self,
        src: &mut BytesMut,
        mem: &mut dyn Memory,
    ) -> Option<DirectTarget> {
        if !self.rx.accepting() {
            return None;
        }
        if let Some(d) = &self.rx.direct {
            return (d.placed < d.len && src.is_empty()).then(|| DirectTarget {
                region: d.region.clone(),
                offset: d.offset + d.placed,
                len: d.len - d.placed,
            });
        }
        if !self.rx.peer_started || !self.incoming_rdma {
            // A refused Write is refused on the ordinary path.
            return None;
        }
        let ulpdu_len = self.deframer.partial_len(src)?;
        let header = src.get(LENGTH_LEN..LENGTH_LEN + TAGGED_HEADER_LEN)?;
        let Ok((SegmentRepr::Tagged(seg), _, Opcode::RdmaWrite)) =
            check_segment(header, self.extensions)
        else {
            return None;
        };
        let len = ulpdu_len - TAGGED_HEADER_LEN;
        let have = src.len() - LENGTH_LEN - TAGGED_HEADER_LEN;
        if len - have < DIRECT_MIN {
            return None;
        }
        let (region, offset) = mem
            .in_place(seg.stag, seg.to, len, Access::REMOTE_WRITE)
            .ok()??;
        // Committed: the payload so far goes to memory, the segment leaves `src`.
        region
            .write_at(offset, src.get(LENGTH_LEN + TAGGED_HEADER_LEN..)?)
            .ok()?;
        src.clear();
        let d = Direct {
            seg,
            ulpdu_len,
            region,
            offset,
            len,
            placed: have,
        };
        let target = DirectTarget {
            region: d.region.clone(),
            offset: offset + have,
            len: len - have,
        };
        self.rx.direct = Some(d);
        Some(target)
    }

    /// Reports that `n` octets of the payload were read into the last
    /// [`direct_target`](Self::direct_target).
    pub fn handle_direct(&mut self, n: usize) {
        if let Some(d) = &mut self.rx.direct {
            let n = n.min(d.len - d.placed);
            d.placed += n;
            self.stats.bytes_received_in_place += n as u64;
        }
    }

    /// Finishes a segment placed directly: its payload octets that were read into `src`
    /// are placed, its PAD and CRC skipped, and it takes effect as the ordinary path's
    /// would. False while it still waits for octets.
    pub(super) fn direct_input(&mut self, src: &mut BytesMut, mem: &mut dyn Memory) -> bool {
        let Some(d) = &mut self.rx.direct else {
            return true;
        };
        let k = (d.len - d.placed).min(src.len());
        if k > 0 {
            if d.region.write_at(d.offset + d.placed, &src[..k]).is_err() {
                // Unreachable (the range was checked when the segment started), but never
                // a stuck stream.
                self.rx.direct = None;
                self.fatal(TermCode::DDP_LOCAL_CATASTROPHIC, None, None);
                return false;
            }
            src.advance(k);
            d.placed += k;
        }
        let trailer = mpa::pad_len(d.ulpdu_len) + CRC_LEN;
        if d.placed < d.len || src.len() < trailer {
            return false;
        }
        src.advance(trailer);
        let (seg, ulpdu_len, len) = (d.seg, d.ulpdu_len, d.len);
        self.rx.direct = None;
        self.deframer.skip(ulpdu_len);
        self.stats.fpdus_received += 1;
        // Only RDMA Write payloads are placed from the socket directly.
        self.stats.octets_received[usize::from(u8::from(Opcode::RdmaWrite))] += len as u64;
        self.write_placed(&seg, len, mem);
        true
    }
}
