//! What `iwarpd stat` asks a daemon besides its local applications' totals: the counters
//! of its other services (the built-in remote-memory target, which runs on an engine of
//! its own), and every queue pair it holds, one line each as `rdma res show qp` lists
//! them: number, service, state, addresses, the owning application's pid and uid, and
//! counters.
//!
//! The local service learns of the other services by [`LocalService::list_service`], and
//! of the owner of each queue pair from the sessions [`enlist`]ed as they start; both are
//! kept here, per service (a process may run several, as the tests do), so that the rest
//! of the local service carries nothing for listings.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use ipc::control::{
    Counters, DeviceCounters, LOCAL_SERVICE, MAX_QPS_PER_PAGE, QpListing, QpPage, QpStateCode,
    Reply, Request, ServiceCounters, error,
};

use super::session::{Session, err};
use super::{Device, LocalService};
use crate::{Engine, EngineStats, Qp};

/// What one local service lists beyond its own engines.
struct Listed {
    device: Weak<Device>,
    /// Its sessions, to learn whose each queue pair is.
    sessions: Vec<Weak<Session>>,
    /// Its daemon's other services, by name.
    services: Vec<(&'static str, Engine)>,
}

/// Every local service's [`Listed`], while it runs.
static LISTED: Mutex<Vec<Listed>> = Mutex::new(Vec::new());

/// Runs `f` on the [`Listed`] of `device`, made if there is none; services that stopped
/// are dropped first.
fn with_listed<T>(device: &Arc<Device>, f: impl FnOnce(&mut Listed) -> T) -> T {
    let mut all = LISTED.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|l| l.device.strong_count() > 0);
    let at = match all
        .iter()
        .position(|l| std::ptr::eq(l.device.as_ptr(), Arc::as_ptr(device)))
    {
        Some(at) => at,
        None => {
            all.push(Listed {
                device: Arc::downgrade(device),
                sessions: Vec::new(),
                services: Vec::new(),
            });
            all.len() - 1
        }
    };
    f(&mut all[at])
}

impl LocalService {
    /// Lists the counters and queue pairs of `engine` as the daemon's service `name`
    /// (`remote_memory` for iwarpd's built-in target) in what this service answers
    /// `iwarpd stat`: its totals agree with the metrics endpoint's for that service.
    pub fn list_service(&self, name: &'static str, engine: Engine) {
        with_listed(&self.device, |l| {
            l.services.retain(|(n, _)| *n != name);
            l.services.push((name, engine));
        });
    }
}

/// Notes a session that starts, so that its queue pairs are listed with its pid and uid.
pub(super) fn enlist(s: &Arc<Session>) {
    with_listed(&s.device, |l| {
        l.sessions.retain(|w| w.strong_count() > 0);
        l.sessions.push(Arc::downgrade(s));
    });
}

/// An engine's counters in the shape of the local service's totals: what the daemon's
/// metrics endpoint shows for a service, and `iwarpd stat` too.
pub fn engine_counters(st: &EngineStats) -> DeviceCounters {
    let mut d = DeviceCounters {
        connections: st.connections,
        connections_closed: st.connections_closed,
        device_queue_pairs: u32::try_from(st.queue_pairs).unwrap_or(u32::MAX),
        ..DeviceCounters::default()
    };
    d.totals.set_traffic(&st.traffic);
    d.totals.set_push(&st.push);
    d
}

/// The answer to [`Request::ServiceStats`] or [`Request::ListQps`] on the control
/// channel of session `s`.
pub(super) fn answer(s: &Arc<Session>, req: &Request) -> Reply {
    match *req {
        Request::ServiceStats => Reply::ServiceStats(services(&s.device)),
        Request::ListQps { after } => Reply::QpList(page(&s.device, after)),
        _ => err(error::MALFORMED, "not a listing request"),
    }
}

/// The counters of the daemon's other services.
fn services(device: &Arc<Device>) -> Vec<ServiceCounters> {
    let services = with_listed(device, |l| l.services.clone());
    services
        .into_iter()
        .map(|(name, engine)| ServiceCounters {
            name: name.to_owned(),
            counters: engine_counters(&engine.stats()),
        })
        .collect()
}

/// The daemon's queue pairs numbered above `after`: a page of them.
fn page(device: &Arc<Device>, after: u32) -> QpPage {
    let (sessions, services) = with_listed(device, |l| (l.sessions.clone(), l.services.clone()));
    // Whose each local queue pair is.
    let mut owners = std::collections::HashMap::new();
    for s in sessions.iter().filter_map(Weak::upgrade) {
        let pid = *s.pid.lock().unwrap_or_else(PoisonError::into_inner);
        for sv in s.objs().qps.values() {
            owners.insert(sv.qp.num().0, (pid, s.uid));
        }
    }
    let local = device.engines.iter().map(|e| (LOCAL_SERVICE, e));
    let others = services.iter().map(|(name, e)| (*name, e));
    let mut qps: Vec<(&str, Qp)> = local
        .chain(others)
        .flat_map(|(name, e)| e.qps().into_iter().map(move |qp| (name, qp)))
        .filter(|(_, qp)| qp.num().0 > after)
        .collect();
    qps.sort_by_key(|(_, qp)| qp.num().0);
    let more = qps.len() > MAX_QPS_PER_PAGE;
    qps.truncate(MAX_QPS_PER_PAGE);
    let unknown = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    let qps = qps
        .into_iter()
        .map(|(service, qp)| {
            let (local, peer) = qp.addrs().unwrap_or((unknown, unknown));
            let owner = owners.get(&qp.num().0).copied();
            let mut counters = Counters::default();
            counters.set_traffic(&qp.stats());
            counters.set_push(&qp.push_counters());
            QpListing {
                num: qp.num().0,
                service: service.to_owned(),
                state: QpStateCode::of(qp.state()),
                local,
                peer,
                pid: owner.map(|(pid, _)| pid),
                uid: owner.and_then(|(_, uid)| uid),
                counters,
            }
        })
        .collect();
    QpPage { qps, more }
}
