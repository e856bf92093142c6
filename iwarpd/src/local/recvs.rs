//! Receive buffers the connection reads on demand, when a Send arrives, as an RNIC reads
//! a receive queue in host memory: what the application posted is there for the peer's
//! next message as soon as its post returns.
//!
//! - [`QpRecvs`]: a queue pair's own receive ring (the entries the servant has not moved
//!   yet, in order), then its shared receive queue.
//! - [`ClientSrq`]: a client's shared receive queue, a ring of its own.
//!
//! This is the only way receives reach a client's connection: the servant never moves
//! them. Entries are copied out and decoded before use, and keep the client's ids (the
//! connection's completions go to the client's ring as they are).

use std::sync::{Arc, Mutex, PoisonError};

use ipc::qpseg::QpSegment;
use ipc::srq::SrqSegment;
use ipc::wqe::decode_rqe;
use rdmap::RecvWr;

use super::logs::{SRQ_GARBAGE, limited};
use offload_engine::SrqFeed;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A client's shared receive queue.
#[derive(Debug)]
pub(super) struct ClientSrq {
    seg: SrqSegment,
    state: Mutex<SrqState>,
}

#[derive(Debug, Default)]
struct SrqState {
    /// The ring's index was garbage: the queue gives nothing more.
    broken: bool,
}

impl ClientSrq {
    pub(super) fn new(seg: SrqSegment) -> Self {
        Self::restore(seg, false)
    }

    /// One a daemon before this one served: whether the ring was dead.
    pub(super) fn restore(seg: SrqSegment, broken: bool) -> Self {
        Self {
            seg,
            state: Mutex::new(SrqState { broken }),
        }
    }

    /// What [`Self::restore`] takes: the segment's depth, and whether the ring is dead.
    pub(super) fn image(&self) -> (u32, bool) {
        (self.seg.depth(), lock(&self.state).broken)
    }

    /// How many receives its ring holds.
    pub(super) fn depth(&self) -> u32 {
        self.seg.depth()
    }

    /// Octets of its segment.
    pub(super) fn octets(&self) -> u64 {
        SrqSegment::size_for(self.seg.depth()) as u64
    }

    /// Its segment's memory file.
    pub(super) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.seg.fd()
    }

    #[cfg(test)]
    pub(super) fn segment(&self) -> &SrqSegment {
        &self.seg
    }
}

/// A client that scribbles over its shared receive queue hurts only its own queue pairs:
/// an entry that does not decode is skipped, and an index more than a ring ahead ends
/// the queue (its queue pairs then find no buffer, and Terminate as for any Send
/// without one).
impl SrqFeed for ClientSrq {
    fn take(&self) -> Option<RecvWr> {
        let mut st = lock(&self.state);
        while !st.broken {
            match self.seg.pop() {
                Ok(None) => return None,
                Ok(Some(e)) => match decode_rqe(&e) {
                    Ok(wr) => return Some(wr),
                    Err(e) => {
                        limited!(SRQ_GARBAGE, warn, error = %e, "a shared receive queue entry that does not decode: skipped");
                    }
                },
                Err(_) => {
                    limited!(
                        SRQ_GARBAGE,
                        warn,
                        "a shared receive queue's index is garbage: the queue is dead"
                    );
                    st.broken = true;
                }
            }
        }
        None
    }
}

/// A daemon queue pair's receive buffers for the engine: its ring, then its shared
/// receive queue. The servant pops the ring through this too, so there is one consumer.
#[derive(Debug)]
pub(super) struct QpRecvs {
    seg: Arc<QpSegment>,
    srq: Option<Arc<ClientSrq>>,
    state: Mutex<RqState>,
}

#[derive(Debug, Default)]
struct RqState {
    /// What was wrong with the ring, once something was: the servant ends the queue
    /// pair for it.
    garbage: Option<&'static str>,
}

impl QpRecvs {
    pub(super) fn new(seg: Arc<QpSegment>, srq: Option<Arc<ClientSrq>>) -> Self {
        Self {
            seg,
            srq,
            state: Mutex::default(),
        }
    }

    /// Its shared receive queue.
    pub(super) fn srq(&self) -> Option<&Arc<ClientSrq>> {
        self.srq.as_ref()
    }

    /// What was wrong with the ring, if something was.
    pub(super) fn garbage(&self) -> Option<&'static str> {
        lock(&self.state).garbage
    }

    /// The next entry of the ring, decoded; `Err` names garbage.
    pub(super) fn pop(&self) -> Result<Option<RecvWr>, &'static str> {
        let mut st = lock(&self.state);
        Self::pop_locked(&self.seg, &mut st)
    }

    fn pop_locked(seg: &QpSegment, st: &mut RqState) -> Result<Option<RecvWr>, &'static str> {
        if let Some(why) = st.garbage {
            return Err(why);
        }
        let popped = match seg.rq_pop() {
            Ok(None) => return Ok(None),
            Ok(Some(e)) => decode_rqe(&e).map(Some).map_err(|m| m.0),
            Err(_) => Err("receive queue index"),
        };
        if let Err(why) = popped {
            st.garbage = Some(why);
        }
        popped
    }
}

impl SrqFeed for QpRecvs {
    fn take(&self) -> Option<RecvWr> {
        {
            let mut st = lock(&self.state);
            if let Ok(Some(wr)) = Self::pop_locked(&self.seg, &mut st) {
                return Some(wr);
            }
        }
        self.srq.as_ref()?.take()
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
    fn a_queue_pair_takes_its_ring_first_then_its_shared_queue() {
        let geo = ipc::qpseg::Geometry {
            sq_depth: 2,
            rq_depth: 2,
            cq_depth: 2,
            staging: 64,
        };
        let d = Arc::new(QpSegment::create(geo).unwrap());
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = QpSegment::map(file, geo).unwrap();
        let (cs, srq) = pair();
        let recvs = QpRecvs::new(d, Some(Arc::new(srq)));
        let wr = |wr_id| RecvWr {
            wr_id,
            sgl: Default::default(),
        };
        for id in [1, 2] {
            assert!(c.rq_push(&encode_rqe(&wr(id)).unwrap()));
        }
        assert!(cs.push(&encode_rqe(&wr(9)).unwrap()));
        // The ring's, in order, then the shared one, with the client's ids.
        let taken: Vec<_> = std::iter::from_fn(|| recvs.take())
            .map(|w| w.wr_id)
            .collect();
        assert_eq!(taken, [1, 2, 9]);
        // A garbage entry is named to the servant, and nothing more is taken.
        assert!(c.rq_push(&[0xff; RQE_SIZE]));
        assert!(c.rq_push(&encode_rqe(&wr(3)).unwrap()));
        assert!(recvs.take().is_none());
        assert!(recvs.pop().is_err());
    }

    #[test]
    fn a_shared_queue_gives_its_receives_in_order() {
        let (c, srq) = pair();
        for wr_id in [7, 8] {
            let wr = RecvWr {
                wr_id,
                sgl: Default::default(),
            };
            assert!(c.push(&encode_rqe(&wr).unwrap()));
        }
        assert_eq!(srq.segment().len_waiting(), 2);
        let (a, b) = (srq.take().unwrap(), srq.take().unwrap());
        assert_eq!((a.wr_id, b.wr_id), (7, 8));
        assert!(srq.take().is_none());
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
        assert_eq!(srq.take().map(|w| w.wr_id), Some(1));
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
