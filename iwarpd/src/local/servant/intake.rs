//! A servant reads what its client posted: the send ring and the domain's push region
//! (seed 000: before the send queue). Every entry is copied out of shared memory and
//! decoded before use; garbage is named, and ends this queue pair alone.

use bytes::{Bytes, BytesMut};
use ipc::push::Snapshot;
use ipc::qpseg::{Discard, QpSegment};
use ipc::wqe::{Data, decode_sqe, sqe_push_discarded, sqe_pushed};
use offload_engine::push::PushShare;
use rdmap::SendWr;

use super::Run;
use super::posting::{Via, marked};

/// Octets an arena holds before a fresh one is taken.
const ARENA: usize = 64 << 10;

/// An owned payload as `Bytes`: an inline one copied out of its entry into `arena` (one
/// allocation per 64 KiB of payloads: a fresh arena once the old one is full and still
/// referenced by requests in flight, the same one again once they are gone), a staged one
/// lent from the staging area without a copy (the client reuses those octets only once
/// the request is retired). `None` for a staged range outside the area.
pub(super) fn own(arena: &mut BytesMut, seg: &QpSegment, d: Data<'_>) -> Option<Bytes> {
    match d {
        Data::Inline(b) => {
            if arena.capacity() < b.len() {
                arena.reserve(b.len().max(ARENA));
            }
            arena.extend_from_slice(b);
            Some(arena.split().freeze())
        }
        // The claim is the client's: checked against the staging area.
        Data::Staged { offset, len } => seg.staged(offset, len),
    }
}

/// How long a pushed twin at the head of the send queue waits for its message (the
/// library publishes the message right after the twin) before it runs from the send
/// queue as a discarded push. A client that marks entries pushed and publishes nothing
/// delays only its own queue pair, by this much per entry.
const TWIN_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// True once the pushed twin at send queue index `index` has waited [`TWIN_WAIT`] for
/// its message (`seen`: the twin being waited for, and since when).
fn twin_waited(seen: &mut Option<(u32, std::time::Instant)>, index: u32) -> bool {
    let now = std::time::Instant::now();
    match *seen {
        Some((i, since)) if i == index => now.duration_since(since) >= TWIN_WAIT,
        _ => {
            *seen = Some((index, now));
            false
        }
    }
}

/// Counts a discarded pushed message, in the queue pair's segment and the device's totals.
fn discard(seg: &QpSegment, share: &PushShare, why: Discard) {
    seg.count_discard(why);
    share.count_discard(why);
}

impl Run {
    /// Send requests the connection can still take: its send queue is as deep as the
    /// client's ring.
    fn sq_room(&self) -> usize {
        self.sq_depth.saturating_sub(self.ring.sends_in_flight())
    }

    pub(super) fn work_waiting(&self) -> bool {
        self.seg
            .sq_pending()
            .map_or(true, |n| n > 0 && self.sq_room() > 0)
    }

    /// Takes what the client posted to its send ring into the connection. `Err` names
    /// the garbage found. (Receives are the connection's to take, when a message needs
    /// one: see [`QpRecvs`](crate::local::recvs::QpRecvs).)
    pub(super) fn take_work(&mut self) -> Result<bool, &'static str> {
        let n = self.seg.sq_pending().map_err(|_| "send queue index")?;
        let take = (n as usize).min(self.sq_room());
        if take == 0 {
            return Ok(false);
        }
        let mut batch = std::mem::take(&mut self.batch);
        let seg = &self.seg;
        let mut taken = 0;
        while taken < take {
            let (index, e) = seg.sq_peek();
            // A pushed twin whose message may not be in its slot yet (the library
            // publishes the twin first): the push pass gets it a moment longer.
            if sqe_pushed(&e) && !twin_waited(&mut self.twin_seen, index) {
                break;
            }
            let arena = &mut self.arena;
            let wr = decode_sqe(&e, &mut |d| own(arena, seg, d)).map_err(|m| m.0)?;
            // A pushed twin that reaches the send queue path: its push was discarded (by
            // this daemon, or by the library, which could not write it to its socket).
            let via = if sqe_pushed(&e) || sqe_push_discarded(&e) {
                Via::QueueAfterDiscard
            } else {
                Via::Queue
            };
            batch.push(marked(wr, via));
            seg.sq_take();
            taken += 1;
        }
        if taken == 0 {
            self.batch = batch;
            return Ok(false);
        }
        let take = taken;
        self.executed(0, take as u64);
        self.post_sends(&mut batch);
        self.batch = batch;
        Ok(true)
    }

    /// Seed 000's engine side: every READY slot of this queue pair is executed if all
    /// admission checks pass, else discarded (its twin entry then runs from the send
    /// queue, its completion flagged). Slots that name a queue pair outside the domain
    /// are discarded by whichever servant of the domain sees them. True if anything was
    /// done.
    pub(super) fn push_pass(&mut self) -> bool {
        let region = &self.push.pd.region;
        if !region.any_ready() {
            return false;
        }
        let mut mine = std::mem::take(&mut self.snapshots);
        let mut foreign = false;
        let (id, pd) = (self.id, &self.push.pd);
        region.ready(
            |qp| qp == id || !pd.has_qp(qp),
            |s| {
                if s.qp == id {
                    mine.push(s);
                } else {
                    // D6: a slot naming a queue pair outside the domain.
                    region.free(s.slot, s.state);
                    discard(&self.seg, &self.push.share, Discard::Security);
                    foreign = true;
                }
            },
        );
        // Oldest twin first: the one at the head can go, the rest then follow in order.
        let head = self.seg.sq_head();
        mine.sort_by_key(|s| s.sq_index.wrapping_sub(head));
        let now = std::time::Instant::now();
        let moved = !mine.is_empty() || foreign;
        for s in mine.drain(..) {
            let admitted = self.admit(&s, now);
            self.push.pd.region.free(s.slot, s.state);
            match admitted {
                Ok(wr) => {
                    self.seg.sq_take();
                    self.executed(1, 0);
                    let mut one = std::mem::take(&mut self.batch);
                    one.push(marked(wr, Via::Push));
                    self.post_sends(&mut one);
                    self.batch = one;
                }
                Err(why) => {
                    discard(&self.seg, &self.push.share, why);
                    // Its twin need not wait for it any longer.
                    self.twin_seen = now.checked_sub(TWIN_WAIT).map(|at| (s.sq_index, at));
                }
            }
        }
        self.snapshots = mine;
        moved
    }

    /// The admission checks of a pushed message, in the seed's order; the request to
    /// execute, or why the message is discarded.
    fn admit(&mut self, s: &Snapshot, now: std::time::Instant) -> Result<SendWr, Discard> {
        let qp = &self.qp;
        let at_head = self.twin_at_head(s);
        self.push
            .share
            .admit_message(&s.entry, &mut self.arena, at_head, || qp.tx_backlog(), now)
    }

    /// D3 through the rings: the twin of `s` is the next entry of the send queue (and is
    /// marked pushed), and nothing of this queue pair is in the connection.
    fn twin_at_head(&self, s: &Snapshot) -> Result<(), Discard> {
        let twin_waiting = self.seg.sq_pending().is_ok_and(|n| n > 0);
        if s.sq_index != self.seg.sq_head() || !twin_waiting || self.ring.sends_in_flight() > 0 {
            return Err(Discard::NotAtHead);
        }
        let (_, twin) = self.seg.sq_peek();
        if !sqe_pushed(&twin) {
            return Err(Discard::Malformed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{ARENA, BytesMut, Data, QpSegment, own};

    /// A staged payload's length is the client's claim: one beyond the staging area is
    /// refused (it was once reserved and zero-filled first: three entries claiming 4 GiB
    /// took iwarpd to 3.1 GB). One inside is lent, not copied: nothing is allocated.
    #[test]
    fn a_staged_claim_is_checked_and_lent_without_a_copy() {
        let seg = QpSegment::create(ipc::qpseg::Geometry::default()).unwrap();
        let staging = seg.geometry().staging;
        let mut arena = BytesMut::new();
        for (offset, len) in [(0, 64 << 20), (0, u32::MAX), (staging, 1), (u32::MAX, 2)] {
            assert!(own(&mut arena, &seg, Data::Staged { offset, len }).is_none());
        }
        let got = own(
            &mut arena,
            &seg,
            Data::Staged {
                offset: 0,
                len: staging,
            },
        );
        assert_eq!(
            got.map(|b| b.len()),
            Some(staging as usize),
            "the whole area fits"
        );
        assert_eq!(arena.capacity(), 0, "lent, not copied");
        let inline = own(&mut arena, &seg, Data::Inline(b"abc")).unwrap();
        assert_eq!(&inline[..], b"abc");
        assert!(arena.capacity() >= ARENA - 3);
    }
}
