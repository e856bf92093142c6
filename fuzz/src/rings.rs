//! The body of `ipc_rings`: the shared-memory structures a daemon reads and a client
//! writes, scribbled on through a second mapping (the client's) while the daemon's side
//! is driven: a protection domain's push region (slots and the snapshots the daemon takes
//! of them), a shared receive queue's ring, and a queue pair's segment (its rings,
//! indices and staging area).
//!
//! Input: a list of operations. An operation's first octet chooses the structure
//! (`op >> 6`: push region, shared receive queue, queue pair segment twice) and the
//! operation (`op & 0x3f`); its arguments follow (missing octets read as 0). The
//! structures are made once per process; each input starts from zeroed ones.
//!
//! Invariants (nothing runs concurrently, so the daemon's view must match memory exactly):
//! no panic; the daemon's snapshots of the push region are exactly the READY slots its
//! filter accepts, each as memory holds it, each once; freeing a snapshot frees exactly
//! that generation of the slot and a stale free changes nothing; a claim takes the first
//! FREE slot from its hint or says none is; the rings' `pop` and `pending` follow the
//! indices (an index more than a ring ahead is garbage, never more entries than a ring
//! holds), a completion is never written into a full ring; staged ranges are read only
//! when they lie inside the area. Entries taken are decoded (a receive entry that decodes
//! round-trips; a pushed entry decodes without panicking).

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use ipc::push::{PushRegion, SLOT_SIZE};
use ipc::qpseg::{CQE_SIZE, Geometry, QpSegment, RQE_SIZE, SQE_SIZE};
use ipc::srq::SrqSegment;
use ipc::wqe::{copy_inline, decode_rqe, decode_sqe, encode_rqe};
use shm::Segment;

use crate::input::Input;

/// Slots of the push region under test.
const SLOTS: u32 = 8;
/// Depth of the shared receive queue under test.
const SRQ_DEPTH: u32 = 8;
/// The queue pair segment under test.
const GEO: Geometry = Geometry {
    sq_depth: 4,
    rq_depth: 4,
    cq_depth: 4,
    staging: 256,
};

/// The segments' layouts, as `ipc` documents them (checked by the unit tests against
/// the types' own accessors).
pub(crate) mod layout {
    /// The octets before a queue pair's or shared receive queue's first ring.
    pub(crate) const HEADER: usize = 4096;
    /// A queue pair's index words, by cache line: `sq_prod`, `sq_cons`, `sq_done`,
    /// `rq_prod`, `rq_cons`, `cq_prod`, `cq_cons`, the daemon's and the client's parked
    /// words, the push discard count.
    pub(crate) const QP_WORDS: [usize; 10] = [0, 64, 128, 192, 256, 320, 384, 448, 512, 576];
    /// `sq_prod`.
    pub(crate) const SQ_PROD: usize = QP_WORDS[0];
    /// `sq_cons`.
    pub(crate) const SQ_CONS: usize = QP_WORDS[1];
    /// `sq_done`.
    pub(crate) const SQ_DONE: usize = QP_WORDS[2];
    /// `rq_prod`.
    pub(crate) const RQ_PROD: usize = QP_WORDS[3];
    /// `rq_cons`.
    pub(crate) const RQ_CONS: usize = QP_WORDS[4];
    /// `cq_prod`.
    pub(crate) const CQ_PROD: usize = QP_WORDS[5];
    /// `cq_cons`.
    pub(crate) const CQ_CONS: usize = QP_WORDS[6];
    /// A shared receive queue's producer index.
    pub(crate) const SRQ_PROD: usize = 0;
    /// Its consumer index.
    pub(crate) const SRQ_CONS: usize = 64;
    /// A push slot's state word, queue pair and send queue index; its entry.
    pub(crate) const SLOT_STATE: usize = 0;
    /// See [`SLOT_STATE`].
    pub(crate) const SLOT_QP: usize = 4;
    /// See [`SLOT_STATE`].
    pub(crate) const SLOT_INDEX: usize = 8;
    /// See [`SLOT_STATE`].
    pub(crate) const SLOT_ENTRY: usize = 64;
}
use layout::*;

/// Both sides of every structure under test.
struct World {
    push: PushRegion,
    push_client: PushRegion,
    push_raw: Segment,
    srq: SrqSegment,
    srq_client: SrqSegment,
    srq_raw: Segment,
    qp: QpSegment,
    qp_raw: Segment,
}

fn dup(fd: std::os::fd::BorrowedFd<'_>) -> std::fs::File {
    std::fs::File::from(fd.try_clone_to_owned().expect("dup"))
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let push = PushRegion::create(SLOTS).expect("push region");
        let srq = SrqSegment::create(SRQ_DEPTH).expect("srq");
        let qp = QpSegment::create(GEO).expect("qp segment");
        World {
            push_client: PushRegion::map(dup(push.fd()), SLOTS).expect("map push"),
            push_raw: Segment::map(dup(push.fd()), SLOTS as usize * SLOT_SIZE).expect("map"),
            srq_client: SrqSegment::map(dup(srq.fd()), SRQ_DEPTH).expect("map srq"),
            srq_raw: Segment::map(dup(srq.fd()), HEADER + SRQ_DEPTH as usize * RQE_SIZE)
                .expect("map"),
            qp_raw: Segment::map(dup(qp.fd()), GEO.len()).expect("map"),
            push,
            srq,
            qp,
        }
    })
}

/// Runs one input (see the module documentation).
pub fn run_rings(data: &[u8]) {
    let w = world();
    // Start from zeroed structures.
    w.push_raw.write(0, &vec![0u8; SLOTS as usize * SLOT_SIZE]);
    w.srq_raw
        .write(0, &vec![0u8; HEADER + SRQ_DEPTH as usize * RQE_SIZE]);
    w.qp_raw.write(0, &vec![0u8; GEO.len()]);
    let mut input = Input(data);
    let mut ops = 0;
    while !input.is_empty() && ops < 256 {
        ops += 1;
        let op = input.u8();
        match op >> 6 {
            0 => push_op(w, op & 0x3f, &mut input),
            1 => srq_op(w, op & 0x3f, &mut input),
            _ => qp_op(w, op & 0x3f, &mut input),
        }
    }
}

fn slot_word(w: &World, slot: u32, at: usize) -> u32 {
    w.push_raw
        .u32(slot as usize * SLOT_SIZE + at)
        .load(Ordering::Relaxed)
}

fn push_op(w: &World, op: u8, input: &mut Input<'_>) {
    let state = |s: u32| slot_word(w, s, SLOT_STATE);
    match op % 7 {
        // The client writes a whole slot, any octets.
        0 => {
            let slot = u32::from(input.u8()) % SLOTS;
            let at = slot as usize * SLOT_SIZE;
            let st = input.u32();
            w.push_raw
                .u32(at + SLOT_QP)
                .store(input.u32(), Ordering::Relaxed);
            w.push_raw
                .u32(at + SLOT_INDEX)
                .store(input.u32(), Ordering::Relaxed);
            let n = usize::from(input.u8());
            w.push_raw
                .write(at + SLOT_ENTRY, &input.entry::<SQE_SIZE>(n));
            w.push_raw.u32(at + SLOT_STATE).store(st, Ordering::Release);
        }
        // A state word alone.
        1 => {
            let slot = u32::from(input.u8()) % SLOTS;
            let v = input.index(state(slot));
            w.push_raw
                .u32(slot as usize * SLOT_SIZE)
                .store(v, Ordering::Release);
        }
        // The library claims a slot.
        2 => {
            let hint = input.u32();
            let before: Vec<u32> = (0..SLOTS).map(state).collect();
            let first_free = (0..SLOTS)
                .map(|i| hint.wrapping_add(i) % SLOTS)
                .find(|&s| before[s as usize] & 3 == 0);
            let got = w.push_client.claim(hint);
            assert_eq!(got, first_free, "claim from {hint}: states {before:?}");
            if let Some(s) = got {
                assert_eq!(state(s), (before[s as usize] & !3) | 1, "claimed: WRITING");
            }
        }
        // The library publishes a slot.
        3 => {
            let slot = u32::from(input.u8()) % SLOTS;
            let (qp, idx) = (input.u32(), input.u32());
            let n = usize::from(input.u8());
            let e = input.entry::<SQE_SIZE>(n);
            let before = state(slot);
            w.push_client.publish(slot, qp, idx, &e);
            assert_eq!(
                state(slot),
                ((before >> 2).wrapping_add(1) << 2) | 2,
                "READY"
            );
            assert_eq!(
                (slot_word(w, slot, SLOT_QP), slot_word(w, slot, SLOT_INDEX)),
                (qp, idx)
            );
        }
        // The daemon takes snapshots, decodes them, frees some.
        4 => daemon_takes_snapshots(w, input),
        // A free under any state word: only the current one frees.
        5 => {
            let slot = u32::from(input.u8()) % SLOTS;
            let cur = state(slot);
            let st = input.index(cur);
            w.push.free(slot, st);
            let want = if st == cur {
                ((st >> 2).wrapping_add(1)) << 2
            } else {
                cur
            };
            assert_eq!(state(slot), want, "free({slot}, {st:#x}) of {cur:#x}");
        }
        // The cheap checks agree with the slots.
        _ => {
            let q = input.u32();
            let ready = |s: u32| state(s) & 3 == 2;
            assert_eq!(w.push.any_ready(), (0..SLOTS).any(ready));
            assert_eq!(
                w.push.any_ready_for(q),
                (0..SLOTS).any(|s| ready(s) && slot_word(w, s, SLOT_QP) == q)
            );
        }
    }
}

/// Push operation 4: the daemon takes snapshots of the slots its filter (an octet and a
/// queue pair) accepts, decodes them and frees those a mask octet picks; each must be the
/// slot as memory holds it.
fn daemon_takes_snapshots(w: &World, input: &mut Input<'_>) {
    let state = |s: u32| slot_word(w, s, SLOT_STATE);
    let filter = input.u8();
    let q = input.u32();
    let want = |qp: u32| match filter % 3 {
        0 => true,
        1 => qp == q,
        _ => qp != q,
    };
    let mut snaps = Vec::new();
    w.push.ready(want, |s| snaps.push(s));
    let expected: Vec<u32> = (0..SLOTS)
        .filter(|&s| state(s) & 3 == 2 && want(slot_word(w, s, SLOT_QP)))
        .collect();
    let seen: Vec<u32> = snaps.iter().map(|s| s.slot).collect();
    assert_eq!(
        seen, expected,
        "snapshots are the READY slots the filter takes"
    );
    let free_mask = input.u8();
    for (i, s) in snaps.iter().enumerate() {
        assert_eq!(s.state, state(s.slot));
        assert_eq!(
            (s.qp, s.sq_index),
            (
                slot_word(w, s.slot, SLOT_QP),
                slot_word(w, s.slot, SLOT_INDEX)
            )
        );
        let mut e = [0u8; SQE_SIZE];
        w.push_raw
            .read(s.slot as usize * SLOT_SIZE + SLOT_ENTRY, &mut e);
        assert_eq!(s.entry, e, "a snapshot is the slot's entry");
        let _ = decode_sqe(&s.entry, &mut copy_inline);
        if free_mask & (1 << (i % 8)) != 0 {
            w.push.free(s.slot, s.state);
            assert_eq!(
                state(s.slot),
                ((s.state >> 2).wrapping_add(1)) << 2,
                "freed"
            );
        }
    }
}

fn srq_op(w: &World, op: u8, input: &mut Input<'_>) {
    let word = |at: usize| w.srq_raw.u32(at).load(Ordering::Relaxed);
    let depth = SRQ_DEPTH;
    match op % 5 {
        // The client sets an index to anything.
        0 => {
            let at = if input.u8() & 1 == 0 {
                SRQ_PROD
            } else {
                SRQ_CONS
            };
            let v = input.index(word(at));
            w.srq_raw.u32(at).store(v, Ordering::Release);
        }
        // The client writes an entry's octets in place.
        1 => {
            let i = u32::from(input.u8()) % depth;
            let n = usize::from(input.u8());
            let e = input.entry::<RQE_SIZE>(n);
            w.srq_raw.write(HEADER + i as usize * RQE_SIZE, &e);
        }
        // The library pushes an entry: refused when the ring is full as the indices say.
        2 => {
            let (prod, cons) = (word(SRQ_PROD), word(SRQ_CONS));
            let n = usize::from(input.u8());
            let e = input.entry::<RQE_SIZE>(n);
            let full = prod.wrapping_sub(cons) >= depth;
            assert_eq!(w.srq_client.push(&e), !full, "push at {prod}/{cons}");
            if !full {
                assert_eq!(word(SRQ_PROD), prod.wrapping_add(1));
                let mut got = [0u8; RQE_SIZE];
                w.srq_raw
                    .read(HEADER + (prod % depth) as usize * RQE_SIZE, &mut got);
                assert_eq!(got, e);
            }
        }
        // The daemon takes entries (at most a ring's worth without the client moving).
        3 => {
            let k = input.u8() % 16;
            for _ in 0..=k {
                let (prod, cons) = (word(SRQ_PROD), word(SRQ_CONS));
                let pending = prod.wrapping_sub(cons);
                match w.srq.pop() {
                    Err(_) => {
                        assert!(pending > depth, "garbage at {prod}/{cons}");
                        break;
                    }
                    Ok(None) => {
                        assert_eq!(pending, 0);
                        break;
                    }
                    Ok(Some(e)) => {
                        assert!(pending > 0 && pending <= depth, "popped at {prod}/{cons}");
                        assert_eq!(word(SRQ_CONS), cons.wrapping_add(1));
                        let mut want = [0u8; RQE_SIZE];
                        w.srq_raw
                            .read(HEADER + (cons % depth) as usize * RQE_SIZE, &mut want);
                        assert_eq!(e, want);
                        if let Ok(wr) = decode_rqe(&e) {
                            let enc = encode_rqe(&wr).expect("a decoded receive encodes");
                            assert_eq!(decode_rqe(&enc), Ok(wr));
                        }
                    }
                }
            }
        }
        _ => {
            let pending = word(SRQ_PROD).wrapping_sub(word(SRQ_CONS));
            let want = if pending > depth { 0 } else { pending as usize };
            assert_eq!(w.srq.len_waiting(), want);
        }
    }
}

fn qp_op(w: &World, op: u8, input: &mut Input<'_>) {
    let word = |at: usize| w.qp_raw.u32(at).load(Ordering::Relaxed);
    let staging_at = HEADER
        + GEO.sq_depth as usize * SQE_SIZE
        + GEO.rq_depth as usize * RQE_SIZE
        + GEO.cq_depth as usize * CQE_SIZE;
    match op % 8 {
        // The client sets any index word (the daemon's too) to anything.
        0 => {
            let at = QP_WORDS[usize::from(input.u8()) % QP_WORDS.len()];
            let v = input.index(word(at));
            w.qp_raw.u32(at).store(v, Ordering::Release);
        }
        // The client writes octets anywhere in its segment.
        1 => {
            let at = input.u32() as usize % GEO.len();
            let n = usize::from(input.u8()).min(GEO.len() - at);
            let e = input.entry::<256>(n);
            w.qp_raw.write(at, &e[..n]);
        }
        // The daemon's view of the send queue.
        2 => {
            let (prod, cons) = (word(SQ_PROD), word(SQ_CONS));
            let pending = prod.wrapping_sub(cons);
            match w.qp.sq_pending() {
                Err(_) => assert!(pending > GEO.sq_depth),
                Ok(n) => {
                    assert_eq!(n, pending);
                    if n > 0 {
                        let (i, e) = w.qp.sq_peek();
                        assert_eq!(i, cons);
                        let mut want = [0u8; SQE_SIZE];
                        w.qp_raw.read(
                            HEADER + (cons % GEO.sq_depth) as usize * SQE_SIZE,
                            &mut want,
                        );
                        assert_eq!(e, want);
                        let _ = decode_sqe(&e, &mut copy_inline);
                        w.qp.sq_take();
                        assert_eq!(word(SQ_CONS), cons.wrapping_add(1));
                        assert_eq!(w.qp.sq_head(), cons.wrapping_add(1));
                    }
                }
            }
        }
        // The daemon retires requests.
        3 => {
            let n = u32::from(input.u8() % 4);
            let done = word(SQ_DONE);
            w.qp.sq_retire(n);
            assert_eq!(word(SQ_DONE), done.wrapping_add(n));
        }
        // The daemon takes a receive entry.
        4 => {
            let (prod, cons) = (word(RQ_PROD), word(RQ_CONS));
            let pending = prod.wrapping_sub(cons);
            match w.qp.rq_pop() {
                Err(_) => assert!(pending > GEO.rq_depth),
                Ok(None) => assert_eq!(pending, 0),
                Ok(Some(e)) => {
                    assert!(pending > 0 && pending <= GEO.rq_depth);
                    let mut want = [0u8; RQE_SIZE];
                    let base = HEADER + GEO.sq_depth as usize * SQE_SIZE;
                    w.qp_raw
                        .read(base + (cons % GEO.rq_depth) as usize * RQE_SIZE, &mut want);
                    assert_eq!(e, want);
                    assert_eq!(word(RQ_CONS), cons.wrapping_add(1));
                    let _ = decode_rqe(&e);
                }
            }
        }
        // The daemon delivers a completion: never into a full ring.
        5 => {
            let (prod, cons) = (word(CQ_PROD), word(CQ_CONS));
            let before = {
                let mut v = vec![0u8; GEO.cq_depth as usize * CQE_SIZE];
                w.qp_raw.read(staging_at - v.len(), &mut v);
                v
            };
            let e = [input.u8() | 1; CQE_SIZE];
            let full = prod.wrapping_sub(cons) >= GEO.cq_depth;
            assert_eq!(w.qp.cq_push(&e), !full, "completion at {prod}/{cons}");
            let mut after = vec![0u8; before.len()];
            w.qp_raw.read(staging_at - after.len(), &mut after);
            if full {
                assert_eq!(after, before, "a full ring written");
                assert_eq!(word(CQ_PROD), prod);
            } else {
                let at = (prod % GEO.cq_depth) as usize * CQE_SIZE;
                assert_eq!(after[at..at + CQE_SIZE], e);
                assert_eq!(word(CQ_PROD), prod.wrapping_add(1));
            }
        }
        // A staged claim: read only inside the area.
        6 => {
            let offset = input.index(0);
            let len = usize::from(input.u8()) * 2;
            let fits = u64::from(offset) + len as u64 <= u64::from(GEO.staging);
            assert_eq!(w.qp.staged_fits(offset, len as u64), fits);
            let got = w.qp.staged(offset, len as u32);
            assert_eq!(got.is_some(), fits);
            if let Some(got) = got {
                let mut want = vec![0u8; len];
                w.qp_raw.read(staging_at + offset as usize, &mut want);
                assert_eq!(got[..], want[..]);
            }
        }
        // The client's view of its send queue's room.
        _ => {
            let (prod, cons) = (word(SQ_PROD), word(SQ_CONS));
            let used = prod.wrapping_sub(cons).min(GEO.sq_depth);
            assert_eq!(w.qp.sq_room(), GEO.sq_depth - used);
            assert_eq!(w.qp.sq_cons_done(), (cons, word(SQ_DONE)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_one_ipc_uses() {
        let w = world();
        run_rings(&[]);
        // sq_prod and sq_cons: publish one, take one.
        w.qp.sq_publish(3);
        assert_eq!(w.qp_raw.u32(SQ_PROD).load(Ordering::Relaxed), 3);
        w.qp.sq_take();
        assert_eq!(w.qp_raw.u32(SQ_CONS).load(Ordering::Relaxed), 1);
        w.qp.sq_retire(2);
        assert_eq!(w.qp_raw.u32(SQ_DONE).load(Ordering::Relaxed), 2);
        assert!(w.qp.rq_push(&[1; RQE_SIZE]));
        assert_eq!(w.qp_raw.u32(RQ_PROD).load(Ordering::Relaxed), 1);
        assert!(w.qp.rq_pop().unwrap().is_some());
        assert_eq!(w.qp_raw.u32(RQ_CONS).load(Ordering::Relaxed), 1);
        assert!(w.qp.cq_push(&[1; CQE_SIZE]));
        assert_eq!(w.qp_raw.u32(CQ_PROD).load(Ordering::Relaxed), 1);
        assert!(w.qp.cq_pop().unwrap().is_some());
        assert_eq!(w.qp_raw.u32(CQ_CONS).load(Ordering::Relaxed), 1);
        let staging_at = GEO.len() - GEO.staging as usize;
        w.qp_raw.write(staging_at + 10, b"abc");
        assert_eq!(&w.qp.staged(10, 3).unwrap()[..], b"abc");
        assert!(w.srq_client.push(&[2; RQE_SIZE]));
        assert_eq!(w.srq_raw.u32(SRQ_PROD).load(Ordering::Relaxed), 1);
        assert!(w.srq.pop().unwrap().is_some());
        assert_eq!(w.srq_raw.u32(SRQ_CONS).load(Ordering::Relaxed), 1);
        let s = w.push_client.claim(0).unwrap();
        w.push_client.publish(s, 7, 9, &[3; SQE_SIZE]);
        assert_eq!(slot_word(w, s, SLOT_QP), 7);
        assert_eq!(slot_word(w, s, SLOT_INDEX), 9);
        assert_eq!(slot_word(w, s, SLOT_STATE) & 3, 2);
    }

    #[test]
    fn hand_made_operations_reach_their_checks() {
        #[rustfmt::skip]
        let input = [
            // push: claim from 3, publish slot 3 for qp 7, snapshot all and free them.
            2, 3, 0, 0, 0,
            3, 3, 7, 0, 0, 0, 1, 0, 0, 0, 4, 1, 2, 3, 4,
            6, 7, 0, 0, 0,
            4, 0, 0, 0, 0, 0, 0xff,
            5, 3, 0x10,
            // srq: push two, pop three; a garbage index.
            0x42, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0x42, 0,
            0x43, 3, 0x44,
            0x40, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0x43, 1,
            // qp: publish 2 send entries, take them; a completion; a staged read.
            0x80, 0, 2, 0x82, 0x82, 0x82, 0x83, 2, 0x87,
            0x85, 9, 0x85, 9, 0x85, 9, 0x85, 9, 0x85, 9,
            0x86, 5, 8, 0x86, 0x7f, 100,
        ];
        run_rings(&input);
    }
}
