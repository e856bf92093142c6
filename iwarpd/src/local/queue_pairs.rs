//! A client's requests about queue pairs and shared receive queues: a queue pair's
//! creation (its rings, doorbells and servant) once it connects or is accepted, its
//! changes, counters, disconnect and destruction; and the shared receive queues.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use bytes::Bytes;
use ipc::control::{Counters, Event, Header, QpChange, QpInfo, QueueDepths, Reply, end, error};
use ipc::qpseg::{Doorbell, Geometry, QpSegment};
use ipc::srq::SrqSegment;
use rdmap::{QpEnd, RecvWr};

use super::admit;
use super::recvs::{ClientSrq, QpRecvs};
use super::replies::{err, not_found};
use super::servant;
use super::session::{ClientPd, Out, Session, reply};
use super::usage::Usage;
use offload_engine::{ConnectError, QpInit};

/// What a client asks of a queue pair it connects or accepts: its domain, its shared
/// receive queue (0: none), its queue depths, and the receives posted before the
/// connection carries data.
pub(super) struct NewQp {
    pub(super) pd: u32,
    pub(super) srq: u32,
    pub(super) depths: QueueDepths,
    pub(super) recvs: Vec<RecvWr>,
}

/// `Disconnect`: starts a graceful close of the client's queue pair `qp`.
pub(super) fn disconnect(s: &Session, qp: u32) -> Reply {
    match s.objs().qps.get(&qp) {
        Some(sv) => {
            sv.qp.disconnect();
            Reply::Done
        }
        None => not_found("queue pair", qp),
    }
}

/// `DestroyQp`: destroys the client's queue pair `qp` (its work finishes or is flushed,
/// its last completions delivered), then answers.
pub(super) async fn destroy(s: &Session, qp: u32) -> Reply {
    let sv = s.objs().qps.remove(&qp);
    match sv {
        Some(sv) => {
            sv.destroy().await;
            Reply::Done
        }
        None => not_found("queue pair", qp),
    }
}

/// `ModifyQp`: changes one setting of the client's queue pair `qp`.
pub(super) fn modify(s: &Session, qp: u32, change: QpChange) -> Reply {
    match s.objs().qps.get(&qp) {
        Some(sv) => {
            match change {
                QpChange::IncomingRdma(on) => sv.qp.set_incoming_rdma(on),
                QpChange::DrainOnLocalFailure(on) => sv.qp.set_drain_on_local_failure(on),
                QpChange::ResumeSendQueue => sv.qp.resume_send_queue(),
            }
            Reply::Done
        }
        None => not_found("queue pair", qp),
    }
}

/// `QueryQp`: the counters of the client's queue pair `qp`.
pub(super) fn query(s: &Session, qp: u32) -> Reply {
    match s.objs().qps.get(&qp) {
        Some(sv) => {
            // The push counters are in the queue pair's segment, which the client reads.
            Reply::QpCounters(Counters {
                traffic: sv.qp.stats(),
                ..Counters::default()
            })
        }
        None => not_found("queue pair", qp),
    }
}

/// `ShareTx`: shares the socket of the client's queue pair `qp` with it (the push path
/// that skips the daemon; the socket goes with the reply). The client can then do to its
/// own connection what it could do to any TCP connection of its own, and nothing more:
/// the transmit lock and its state are in its own queue pair's segment. Refused for a
/// privileged port (either end below 1024) unless the client runs as root, since the
/// port vouches to the peer for a privileged process.
pub(super) fn share_tx(s: &Session, qp: u32) -> (Reply, Vec<OwnedFd>) {
    if !s.device.share.cfg.share_socket {
        return (
            err(
                error::REFUSED,
                "this iwarpd does not share sockets (push.share_socket is off)",
            ),
            Vec::new(),
        );
    }
    let Some((q, seg)) = s
        .objs()
        .qps
        .get(&qp)
        .map(|sv| (sv.qp.clone(), sv.seg.clone()))
    else {
        return (not_found("queue pair", qp), Vec::new());
    };
    let privileged = q
        .addrs()
        .is_none_or(|(local, peer)| local.port() < 1024 || peer.port() < 1024);
    if privileged && s.uid != Some(0) {
        return (
            err(
                error::REFUSED,
                "a connection on a privileged port is not shared with an unprivileged application",
            ),
            Vec::new(),
        );
    }
    match q.share_tx(seg, s.device.share.clone()) {
        Ok(fd) => (Reply::Done, vec![fd]),
        Err(e) => (
            err(error::REFUSED, format!("the socket is not shared: {e}")),
            Vec::new(),
        ),
    }
}

/// `CreateSrq`: a shared receive queue at least `depth` deep (its segment's memory file
/// goes with the reply).
pub(super) fn create_srq(s: &Session, depth: u32) -> (Reply, Vec<OwnedFd>) {
    let need = Usage {
        srqs: 1,
        files: 1,
        octets: SrqSegment::size_for(SrqSegment::depth_for(depth as usize)) as u64,
        ..Usage::default()
    };
    if let Some(r) = admit::check(s, need) {
        return (r, Vec::new());
    }
    let depth = SrqSegment::depth_for(depth as usize);
    let created =
        SrqSegment::create(depth).and_then(|seg| Ok((seg.fd().try_clone_to_owned()?, seg)));
    match created {
        Ok((fd, seg)) => {
            let srq = {
                let mut o = s.objs();
                let srq = o.id();
                o.srqs.insert(srq, Arc::new(ClientSrq::new(seg)));
                srq
            };
            (Reply::Srq { srq, depth }, vec![fd])
        }
        Err(e) => (
            err(error::REFUSED, format!("no shared receive queue: {e}")),
            Vec::new(),
        ),
    }
}

/// `DestroySrq`: lets go of the client's shared receive queue `srq`.
pub(super) fn destroy_srq(s: &Session, srq: u32) -> Reply {
    match s.objs().srqs.remove(&srq) {
        Some(_) => Reply::Done,
        None => not_found("shared receive queue", srq),
    }
}

/// Checks the domain, the queue depths and the queue pair limit, and counts one more
/// connecting (with the rings' geometry), or says why not (boxed: a reply is large).
pub(super) fn admit_qp(s: &Session, pd: u32, depths: QueueDepths) -> Result<Geometry, Box<Reply>> {
    let limits = &s.device.limits;
    let geo = geometry(depths, limits.max_queue_depth, limits.staging)
        .map_err(|why| err(error::LIMIT, why))?;
    if !s.objs().pds.contains_key(&pd) {
        return Err(Box::new(not_found("protection domain", pd)));
    }
    let need = Usage {
        qps: 1,
        files: super::files::PER_QP,
        octets: geo.len() as u64,
        ..Usage::default()
    };
    if let Some(r) = admit::check(s, need) {
        return Err(Box::new(r));
    }
    let mut o = s.objs();
    o.connecting += 1;
    o.connecting_octets += need.octets;
    Ok(geo)
}

/// Connects or accepts a queue pair admitted by [`admit_qp`] (counted as connecting) on
/// a task of the session's, which answers the request `h` when done. The task ends with
/// the session: a client that goes away while its queue pair connects leaves nothing
/// behind (its connect is dropped, or the queue pair it made destroyed).
pub(super) fn spawn_establish<F, Fut>(
    s: &Arc<Session>,
    h: Header,
    what: (u32, u32, Geometry),
    recvs: Vec<RecvWr>,
    establish: F,
) where
    F: FnOnce(QpInit) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(offload_engine::Qp, Bytes), ConnectError>> + Send + 'static,
{
    /// Counts the queue pair as connecting (with its segment's octets) until it is a
    /// servant's or gone (also when its task is aborted).
    struct Connecting(Arc<Session>, u64);
    impl Drop for Connecting {
        fn drop(&mut self) {
            let mut o = self.0.objs();
            o.connecting -= 1;
            o.connecting_octets -= self.1;
        }
    }
    let counted = Connecting(s.clone(), what.2.len() as u64);
    let task = async move {
        let s = counted.0.clone();
        let r = start_qp(&s, what, recvs, establish).await;
        drop(counted);
        let (r, fds) = r.unwrap_or_else(|r| (r, Vec::new()));
        reply(&s, h, r, fds).await;
    };
    let mut o = s.objs();
    // Tasks that finished are reaped here, so the set holds only those under way.
    while o.pending.try_join_next().is_some() {}
    o.pending.spawn(task);
}

/// Creates a queue pair's segment and doorbells, runs `establish` (connect or accept)
/// with receives translated, and starts its servant.
async fn start_qp<F, Fut>(
    s: &Arc<Session>,
    (pd, srq, geo): (u32, u32, Geometry),
    recvs: Vec<RecvWr>,
    establish: F,
) -> Result<(Reply, Vec<OwnedFd>), Reply>
where
    F: FnOnce(QpInit) -> Fut,
    Fut: Future<Output = Result<(offload_engine::Qp, Bytes), ConnectError>>,
{
    let Some(ClientPd {
        engine: engine_pd,
        push,
    }) = s.objs().pds.get(&pd).cloned()
    else {
        return Err(not_found("protection domain", pd));
    };
    let srq = match srq {
        0 => None,
        n => match s.objs().srqs.get(&n) {
            Some(q) => Some(q.clone()),
            None => return Err(not_found("shared receive queue", n)),
        },
    };
    let io_err = |e: io::Error| {
        err(
            error::REFUSED,
            format!("shared memory for the queue pair: {e}"),
        )
    };
    let seg = Arc::new(QpSegment::create(geo).map_err(io_err)?);
    let (to_daemon, to_client) = (
        Doorbell::new().map_err(io_err)?,
        Doorbell::new().map_err(io_err)?,
    );
    let fds = [seg.fd(), to_daemon.as_fd(), to_client.as_fd()]
        .iter()
        .map(|f| f.try_clone_to_owned())
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_err)?;
    // The connection reads the client's receive ring (then its shared receive queue)
    // when a message needs a receive, and writes its completions into the client's ring.
    let feed = Arc::new(QpRecvs::new(seg.clone(), srq));
    let prep = servant::Prepared::new(seg, to_client, feed.clone(), s.device.share.clone());
    let mut init = QpInit::with_completions(engine_pd, prep.completions());
    init.srq = Some(offload_engine::Srq::fed(feed));
    // Every send request reports its end, so its ring entry retires (the completion
    // ring passes on only those the client asked for).
    init.complete_every_send = true;
    // The servant runs its client's push path itself.
    init.push = false;
    // The engine's queues are as deep as the rings, so that it takes all the client
    // may post.
    init.queue_depths = Some((geo.sq_depth as usize, geo.rq_depth as usize));
    init.recvs = recvs;
    let (qp, private) = establish(init).await.map_err(|e| match e {
        ConnectError::Rejected {
            private_data,
            refused,
        } => Reply::Rejected {
            private_data,
            refused,
        },
        ConnectError::Io(io) => err(
            error::of_connect(io.kind()),
            ConnectError::Io(io).to_string(),
        ),
        e => err(error::CONNECT, e.to_string()),
    })?;
    tracing::debug!(qp = %qp.num(), "local client's queue pair connected");
    let (ird, ord) = qp.ird_ord();
    // The client's id, not the engine's number (which an upgrade of the daemon changes).
    let id = s.objs().id();
    let info = QpInfo {
        qp: id,
        num: qp.num().0,
        ird,
        ord,
        mulpdu: qp.mulpdu(),
        extensions: qp.extensions().bits(),
        private,
        geometry: geo,
        framing: qp.framing(),
    };
    let sv = prep.start(
        id,
        qp,
        to_daemon,
        servant::Push {
            pd: push,
            share: s.device.share.clone(),
        },
        on_end(s, id),
    );
    let orphan = {
        let mut o = s.objs();
        if o.released {
            Some(sv)
        } else {
            o.qps.insert(id, sv);
            None
        }
    };
    if let Some(sv) = orphan {
        // The client went away meanwhile: nobody will destroy it but this.
        sv.destroy().await;
        return Err(err(error::REFUSED, "the application went away"));
    }
    Ok((Reply::Qp(info), fds))
}

/// Tells the client of `s` how its queue pair `id` ended.
pub(super) fn on_end(s: &Arc<Session>, id: u32) -> servant::OnEnd {
    let s = Arc::downgrade(s);
    Box::new(move |how: QpEnd| {
        if let Some(s) = s.upgrade() {
            let (how, term) = match how {
                QpEnd::Closed => (end::CLOSED, [0, 0]),
                QpEnd::TerminatedByPeer(t) => (end::TERMINATED_BY_PEER, t.to_wire()),
                QpEnd::Terminated(t) => (end::TERMINATED, t.to_wire()),
                QpEnd::ConnectionLost => (end::CONNECTION_LOST, [0, 0]),
                QpEnd::TimedOut => (end::TIMED_OUT, [0, 0]),
                QpEnd::CqOverrun => (end::CQ_OVERRUN, [0, 0]),
                QpEnd::Misused => (end::MISUSED, [0, 0]),
                _ => (end::CONNECTION_LOST, [0, 0]),
            };
            let msg = Event::QpEnded { qp: id, how, term }.encode();
            let _ = s.out.try_send(Out::new(msg, Vec::new()));
        }
    })
}

/// Rings at least as deep as the client asks (powers of two), with a completion ring
/// for both, and a staging area of `staging` octets (at most the segment's limit, in
/// whole 64-octet lines); or why not, when it asks for more than `max` or for nothing.
fn geometry(want: QueueDepths, max: u32, staging: u32) -> Result<Geometry, String> {
    let max = max.min(ipc::qpseg::MAX_DEPTH);
    let ring = |n: u32, which: &str| match n {
        0 => Err(format!("a {which} queue depth of 0: ask for at least 1")),
        n if n > max => Err(format!(
            "a {which} queue depth of {n} is more than iwarpd allows ({max}): ask for \
             less, or raise `max_queue_depth` in iwarpd's configuration"
        )),
        n => Ok(n.next_power_of_two()),
    };
    let (sq_depth, rq_depth) = (ring(want.sq, "send")?, ring(want.rq, "receive")?);
    Ok(Geometry {
        sq_depth,
        rq_depth,
        cq_depth: (sq_depth + rq_depth)
            .next_power_of_two()
            .min(ipc::qpseg::MAX_DEPTH),
        staging: staging.min(ipc::qpseg::MAX_STAGING).next_multiple_of(64),
    })
}

#[cfg(test)]
mod tests {
    use super::{QueueDepths, geometry};

    const STAGING: u32 = 4 << 20;

    /// Rings are the power of two at or above what the client asks; nothing, or more
    /// than the limit, is refused by name; a limit beyond the rings' own counts as theirs.
    #[test]
    fn rings_are_as_deep_as_asked_within_the_limit() {
        let g = geometry(QueueDepths { sq: 100, rq: 600 }, 1000, STAGING).unwrap();
        assert_eq!((g.sq_depth, g.rq_depth, g.cq_depth), (128, 1024, 2048));
        assert_eq!(g.staging, STAGING, "the daemon's setting");
        let odd = |staging| geometry(QueueDepths { sq: 8, rq: 8 }, 1000, staging).unwrap();
        assert_eq!(odd(100).staging, 128, "in whole lines");
        assert_eq!(odd(u32::MAX).staging, ipc::qpseg::MAX_STAGING);
        let g = geometry(QueueDepths { sq: 1000, rq: 1 }, 1000, STAGING).unwrap();
        assert_eq!((g.sq_depth, g.rq_depth), (1024, 1));
        let e = geometry(QueueDepths { sq: 1001, rq: 8 }, 1000, STAGING).unwrap_err();
        assert!(e.contains("1001") && e.contains("max_queue_depth"), "{e}");
        let e = geometry(QueueDepths { sq: 8, rq: 0 }, 1000, STAGING).unwrap_err();
        assert!(e.contains("receive queue depth of 0"), "{e}");
        let max = ipc::qpseg::MAX_DEPTH;
        let e = geometry(QueueDepths { sq: max + 1, rq: 8 }, u32::MAX, STAGING).unwrap_err();
        assert!(e.contains(&format!("({max})")), "{e}");
        let g = geometry(QueueDepths { sq: max, rq: max }, u32::MAX, STAGING).unwrap();
        assert_eq!(
            g.cq_depth, max,
            "the completion ring stops at the limit too"
        );
    }
}
