//! What `iwarpd stat` asks a daemon besides its local applications' totals: the counters
//! of its other services (the built-in remote-memory target, which runs on an engine of
//! its own), and every queue pair it holds, one line each as `rdma res show qp` lists
//! them: number, service, state, addresses, the owning application's pid and uid, and
//! counters.
//!
//! The local service learns of the other services by [`LocalService::list_service`], and
//! of the owner of each queue pair from its sessions ([`Users`](super::users::Users)).

use std::sync::{Arc, PoisonError};

use ipc::control::{
    Counters, DeviceCounters, LOCAL_SERVICE, MAX_QPS_PER_PAGE, QpListing, QpPage, QpStateCode,
    Reply, Request, ServiceCounters, error,
};

use super::replies::err;
use super::session::Session;
use super::{Device, LocalService};
use offload_engine::{Engine, EngineStats, Qp};

/// The daemon's other services, by name.
pub(super) type Services = std::sync::Mutex<Vec<(&'static str, Engine)>>;

impl LocalService {
    /// Lists the counters and queue pairs of `engine` as the daemon's service `name`
    /// (`remote_memory` for iwarpd's built-in target) in what this service answers
    /// `iwarpd stat`: its totals agree with the metrics endpoint's for that service.
    pub fn list_service(&self, name: &'static str, engine: Engine) {
        let mut l = self
            .device
            .services
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        l.retain(|(n, _)| *n != name);
        l.push((name, engine));
    }
}

/// The daemon's other services now.
fn listed(device: &Device) -> Vec<(&'static str, Engine)> {
    device
        .services
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
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
    d.totals.traffic = st.traffic;
    d.totals.push = st.push;
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
    listed(device)
        .into_iter()
        .map(|(name, engine)| ServiceCounters {
            name: name.to_owned(),
            counters: engine_counters(&engine.stats()),
        })
        .collect()
}

/// The daemon's queue pairs numbered above `after`: a page of them.
fn page(device: &Arc<Device>, after: u32) -> QpPage {
    let services = listed(device);
    // Whose each local queue pair is.
    let mut owners = std::collections::HashMap::new();
    for s in device.users.sessions() {
        for sv in s.objs().qps.values() {
            owners.insert(sv.qp.num().0, (s.pid, s.uid));
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
            let counters = Counters {
                traffic: qp.stats(),
                push: qp.push_counters(),
            };
            QpListing {
                num: qp.num().0,
                service: service.to_owned(),
                state: QpStateCode::of(qp.state()),
                local,
                peer,
                pid: owner.and_then(|(pid, _)| pid),
                uid: owner.and_then(|(_, uid)| uid),
                counters,
            }
        })
        .collect();
    QpPage { qps, more }
}
