//! A client's shared receive queue: its ring in shared memory, read only when one of the
//! client's queue pairs needs a buffer, and what the receives taken from it stand for.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use ipc::srq::SrqSegment;
use ipc::wqe::decode_rqe;
use rdmap::{RecvWr, WrId};

use crate::SrqFeed;

/// Set in the daemon-side ids of receives taken from a shared receive queue (a servant's
/// own ids count up from 0 and never reach it).
pub(super) const SRQ_ID: u64 = 1 << 63;

/// The feed of one client shared receive queue.
#[derive(Debug)]
pub(super) struct ClientSrq {
    seg: SrqSegment,
    ids: Mutex<Ids>,
}

#[derive(Debug, Default)]
struct Ids {
    next: u64,
    /// Receives taken and not yet complete: daemon id to the client's.
    taken: HashMap<u64, WrId>,
    /// The ring's index was garbage: the queue gives nothing more.
    broken: bool,
}

impl ClientSrq {
    pub(super) fn new(seg: SrqSegment) -> Self {
        Self {
            seg,
            ids: Mutex::default(),
        }
    }

    #[cfg(test)]
    pub(super) fn segment(&self) -> &SrqSegment {
        &self.seg
    }

    /// The client's id of the receive the daemon knows as `id`, which completed.
    pub(super) fn complete(&self, id: u64) -> Option<WrId> {
        self.ids().taken.remove(&id)
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, Ids> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Entries are copied out and decoded before use. A client that scribbles over its ring
/// hurts only its own queue pairs: an entry that does not decode is skipped, and an index
/// more than a ring ahead ends the queue (its queue pairs then find no buffer, and
/// Terminate as for any Send without one).
impl SrqFeed for ClientSrq {
    fn take(&self) -> Option<RecvWr> {
        let mut ids = self.ids();
        while !ids.broken {
            match self.seg.pop() {
                Ok(None) => return None,
                Ok(Some(e)) => match decode_rqe(&e) {
                    Ok(mut wr) => {
                        let id = SRQ_ID | ids.next;
                        ids.next = (ids.next + 1) & !SRQ_ID;
                        ids.taken.insert(id, wr.wr_id);
                        wr.wr_id = id;
                        return Some(wr);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "a shared receive queue entry that does not decode: skipped");
                    }
                },
                Err(_) => {
                    tracing::warn!("a shared receive queue's index is garbage: the queue is dead");
                    ids.broken = true;
                }
            }
        }
        None
    }

    fn len(&self) -> usize {
        self.seg.len_waiting()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::qpseg::RQE_SIZE;
    use ipc::wqe::encode_rqe;

    fn pair() -> (SrqSegment, ClientSrq) {
        let d = SrqSegment::create(4).unwrap();
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = SrqSegment::map(file, 4).unwrap();
        (c, ClientSrq::new(d))
    }

    #[test]
    fn receives_get_ids_of_their_own_and_complete_once() {
        let (c, srq) = pair();
        for wr_id in [7, 8] {
            let wr = RecvWr {
                wr_id,
                sgl: Default::default(),
            };
            assert!(c.push(&encode_rqe(&wr).unwrap()));
        }
        assert_eq!(srq.len(), 2);
        let (a, b) = (srq.take().unwrap(), srq.take().unwrap());
        assert!(a.wr_id & SRQ_ID != 0 && a.wr_id != b.wr_id);
        assert!(srq.take().is_none());
        assert_eq!(srq.complete(b.wr_id), Some(8));
        assert_eq!(srq.complete(b.wr_id), None, "once");
        assert_eq!(srq.complete(a.wr_id), Some(7));
    }

    #[test]
    fn garbage_is_skipped_or_ends_the_queue() {
        let (c, srq) = pair();
        assert!(c.push(&[0xff; RQE_SIZE]));
        let good = RecvWr {
            wr_id: 1,
            sgl: Default::default(),
        };
        assert!(c.push(&encode_rqe(&good).unwrap()));
        assert_eq!(srq.take().map(|w| srq.complete(w.wr_id)), Some(Some(1)));
        // The client claims more entries than the ring holds: its producer index (the
        // header's first word) far ahead.
        let file = std::fs::File::from(srq.segment().fd().try_clone_to_owned().unwrap());
        let raw = shm::Segment::map(file, 4096 + 4 * RQE_SIZE).unwrap();
        raw.u32(0).store(100, std::sync::atomic::Ordering::Release);
        assert!(srq.take().is_none());
        // Fixing the index does not revive it.
        raw.u32(0).store(2, std::sync::atomic::Ordering::Release);
        assert!(c.push(&encode_rqe(&good).unwrap()));
        assert!(srq.take().is_none(), "the queue stays dead");
    }
}
