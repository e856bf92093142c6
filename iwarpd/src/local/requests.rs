//! A client's requests, each handed to the module of its concern (memory, connections,
//! queue pairs; the device's own are answered here), and their answers sent back.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use ipc::control::{Header, Reply, Request};

use super::connections;
use super::memory;
use super::queue_pairs::{self, NewQp};
use super::session::{Answer, Session, reply};

/// Answers the request `req` (`h`: its header; `fds`: the descriptors that came with it).
pub(super) async fn handle(s: &Arc<Session>, h: Header, req: Request, mut fds: Vec<OwnedFd>) {
    let answer = match req {
        Request::Open { pid } => open(s, pid).into(),
        Request::AllocPd => memory::alloc_pd(s).into(),
        Request::DeallocPd { pd } => memory::dealloc_pd(s, pd).into(),
        req @ Request::RegMrAt { .. } => {
            memory::registration_delay(s).await;
            memory::handle(s, req, fds.pop()).into()
        }
        Request::DeregMr { stag } => memory::dereg_mr(s, stag).await.into(),
        req @ (Request::RegMr { .. }
        | Request::ReserveStag
        | Request::AllocFastRegMr { .. }
        | Request::AllocMw { .. }
        | Request::DeallocMw { .. }
        | Request::BindMw { .. }
        | Request::Invalidate { .. }) => memory::handle(s, req, fds.pop()).into(),
        Request::Listen { addr } => connections::listen(s, h, addr).await,
        Request::CloseListener { id } => connections::close_listener(s, id).into(),
        Request::Connect {
            pd,
            srq,
            depths,
            addr,
            private,
            recvs,
            rtr,
        } => {
            let qp = NewQp {
                pd,
                srq,
                depths,
                recvs,
            };
            connections::connect(s, h, qp, addr, (private, rtr))
        }
        Request::Accept {
            incoming,
            pd,
            srq,
            depths,
            private,
            recvs,
        } => {
            let qp = NewQp {
                pd,
                srq,
                depths,
                recvs,
            };
            connections::accept(s, h, incoming, qp, private)
        }
        Request::Reject { incoming, private } => connections::reject(s, incoming, private).into(),
        Request::Disconnect { qp } => queue_pairs::disconnect(s, qp).into(),
        Request::DestroyQp { qp } => queue_pairs::destroy(s, qp).await.into(),
        Request::ModifyQp { qp, change } => queue_pairs::modify(s, qp, change).into(),
        Request::QueryQp { qp } => queue_pairs::query(s, qp).into(),
        Request::ShareTx { qp } => queue_pairs::share_tx(s, qp).into(),
        Request::CreateSrq { depth } => queue_pairs::create_srq(s, depth).into(),
        Request::DestroySrq { srq } => queue_pairs::destroy_srq(s, srq).into(),
        Request::QueryDevice => query_device(s).into(),
        ref listing @ (Request::ServiceStats | Request::ListQps { .. }) => {
            super::listing::answer(s, listing).into()
        }
        Request::Stats => stats(s).into(),
    };
    if let Answer::Reply(r, fds) = answer {
        reply(s, h, r, fds).await;
    }
}

/// `Open`: the client (claiming to be process `claimed`) opens the device; the reply is
/// the daemon's process id.
fn open(s: &Session, claimed: u32) -> Reply {
    // The pid the client claims is its word; the kernel's is the one logged.
    let (pid, uid) = (s.pid, s.uid);
    tracing::debug!(pid, uid, claimed, "local client opened the device");
    Reply::Id(std::process::id())
}

/// `QueryDevice`: the engine's settings, within the limits the daemon sets its clients.
fn query_device(s: &Session) -> Reply {
    let l = &s.device.limits;
    let cfg = s.engine.config();
    let limit = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Reply::Device(ipc::control::DeviceAttrs {
        max_qp: limit(l.max_qps),
        max_mr: limit(l.max_mrs),
        max_srq: limit(l.max_srqs),
        sq_depth: l.max_queue_depth,
        rq_depth: l.max_queue_depth,
        max_send_sge: ipc::wqe::SQ_SGES as u32,
        max_recv_sge: ipc::wqe::RQ_SGES as u32,
        push_slots: l.push.slots,
        ..ipc::control::DeviceAttrs::settings(&cfg.mpa, &cfg.stream)
    })
}

/// `Stats`: the device's counters, with the client's own queue pairs and memory entries.
fn stats(s: &Session) -> Reply {
    let own = {
        let o = s.objs();
        (o.qps.len() as u32, (o.mrs.len() + o.mws.len()) as u32)
    };
    Reply::Stats(s.device.counters(own))
}
