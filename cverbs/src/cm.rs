//! The connection manager's identifiers (librdmacm): addresses, listening, connecting,
//! accepting and disconnecting, each answered by the event librdmacm gives, in its order:
//! ADDR_RESOLVED, ROUTE_RESOLVED, then ESTABLISHED (or REJECTED, UNREACHABLE) on the
//! active side; CONNECT_REQUEST on a listener, then ESTABLISHED on the new identifier;
//! DISCONNECTED on both when the connection ends.
//!
//! The work that waits on the network (connect, accept, the listener's accept loop, the
//! watch for the end) runs on the library's runtime thread; the calls return at once, as
//! librdmacm's do, except on a synchronous identifier (made without a channel), whose
//! calls wait for their event (`CmId::complete`; endpoints are in `cm_ep`, queue pairs in
//! `cm_qp`).

use std::cell::UnsafeCell;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use libc::{c_int, c_void, sockaddr};

use crate::abi::*;
use crate::cm_abi::*;
use crate::cm_events::{EventChannel, Owner, What, channel};
use crate::errors::{Errno, once, unsupported};
use crate::live::Live;
use crate::open::cm_context;
use crate::qp::Qp;
use crate::sockaddr::{from_c, to_c};

static IDS: Live<CmId> = Live::new();

/// An identifier.
#[repr(C)]
pub(crate) struct CmId {
    ibv: UnsafeCell<rdma_cm_id>,
    channel: Arc<EventChannel>,
    state: Mutex<State>,
    /// Its events: none after it is destroyed.
    events: Arc<Owner>,
    /// Made without a channel: `channel` is its own, and each call waits for its event
    /// (`complete`).
    sync: bool,
}

/// Where an identifier is.
#[derive(Default)]
pub(crate) struct State {
    /// The address it is bound to, or resolved from.
    src: Option<SocketAddr>,
    /// The peer's address.
    dst: Option<SocketAddr>,
    /// Its queue pair (`rdma_create_qp`).
    pub(crate) qp: Option<Arc<Qp>>,
    /// A connection request not yet answered (an identifier a listener made).
    incoming: Option<verbs::Incoming>,
    /// Its listener's accept loop, or its connection's watch.
    task: Option<tokio::task::AbortHandle>,
    /// An endpoint's listener (`rdma_create_ep`): the queue pair each request it hands
    /// out (`rdma_get_request`) gets.
    pub(crate) qp_init_attr: Option<ibv_qp_init_attr>,
    /// The completion queues and channels `rdma_create_qp` made for it (none passed).
    pub(crate) own_cqs: Vec<(*mut ibv_cq, *mut ibv_comp_channel)>,
    /// `rdma_disconnect` was called (a synchronous identifier waits only the first time).
    disconnecting: bool,
}

// SAFETY: the pointers in `ibv` are addresses handed to C (the context, channel, queue
// pair, and the program's `context`); Rust writes the C structure only under `state`'s
// lock, and reads through no pointer of it.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

impl CmId {
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn ptr(&self) -> *mut rdma_cm_id {
        self.ibv.get()
    }

    /// Queues an event for this identifier, unless it was destroyed.
    fn post(&self, what: What) {
        self.channel
            .post(self.ptr(), std::ptr::null_mut(), &self.events, what);
    }

    /// Whether it was made without a channel (each call waits for its event).
    pub(crate) fn is_sync(&self) -> bool {
        self.sync
    }

    /// A synchronous identifier's wait for the event the call just started (librdmacm's
    /// `ucma_complete`): the event is kept in its `event` (acknowledged at the next call or
    /// at destruction), and one that failed is -1 with errno (`ECONNREFUSED` for a
    /// rejection). 0 at once for an identifier with a channel.
    pub(crate) fn complete(&self) -> c_int {
        if !self.sync {
            return 0;
        }
        self.ack_held();
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: our own channel and a pointer of ours to fill.
        if unsafe { crate::cm_events::rdma_get_cm_event(self.channel.ibv(), &mut ev) } != 0 {
            return -1;
        }
        self.hold(ev);
        // SAFETY: an event just handed out, alive until acknowledged (by this library).
        let (event, status) = unsafe { ((*ev).event, (*ev).status) };
        match (event, status) {
            (_, 0) => 0,
            (RDMA_CM_EVENT_REJECTED, _) => Errno(libc::ECONNREFUSED).fail(),
            (_, s) => Errno(s.abs()).fail(),
        }
    }

    /// Keeps `ev` in the C structure's `event` (a synchronous call's outcome).
    pub(crate) fn hold(&self, ev: *mut rdma_cm_event) {
        let _st = self.state();
        // SAFETY: the C structure this identifier owns, written under `state`'s lock.
        unsafe { (*self.ptr()).event = ev };
    }

    /// Acknowledges the event kept in `event`, if any.
    fn ack_held(&self) {
        let _st = self.state();
        // SAFETY: as in `hold`.
        let ev = unsafe { std::mem::replace(&mut (*self.ptr()).event, std::ptr::null_mut()) };
        if !ev.is_null() {
            crate::cm_events::rdma_ack_cm_event(ev);
        }
    }

    /// Writes the C structure's addresses and `verbs` (under the state's lock, held by
    /// the caller as `st`).
    pub(crate) fn publish(&self, st: &State) {
        let ibv = self.ibv.get();
        // SAFETY: the C structure this identifier owns, written under `state`'s lock.
        unsafe {
            (*ibv).verbs = cm_context().unwrap_or(std::ptr::null_mut());
            if let Some(a) = st.src {
                (*ibv).route.addr.src_storage = to_c(a);
            }
            if let Some(a) = st.dst {
                (*ibv).route.addr.dst_storage = to_c(a);
            }
            (*ibv).qp = st.qp.as_ref().map_or(std::ptr::null_mut(), |q| q.ibv());
        }
    }
}

/// The identifier behind `id`, if it is alive.
pub(crate) fn id_of(id: *const rdma_cm_id) -> Result<Arc<CmId>, Errno> {
    IDS.get(id).ok_or(Errno::EINVAL)
}

/// A new identifier on `ch` with the program's `context` (`sync`: `ch` is its own).
fn new_id(ch: Arc<EventChannel>, context: *mut c_void, ps: c_int, sync: bool) -> Arc<CmId> {
    // SAFETY: rdma_cm_id is plain C data: all zeroes is its empty value.
    let mut ibv: rdma_cm_id = unsafe { std::mem::zeroed() };
    ibv.channel = ch.ibv();
    ibv.context = context;
    ibv.ps = ps;
    ibv.port_num = 1;
    ibv.qp_type = IBV_QPT_RC;
    ch.ids.fetch_add(1, Ordering::Relaxed);
    let ptr = IDS.add(CmId {
        ibv: UnsafeCell::new(ibv),
        channel: ch,
        state: Mutex::default(),
        events: Arc::default(),
        sync,
    });
    IDS.get(ptr).expect("just added")
}

/// `rdma_create_id`: a new identifier on `ch` (TCP port space; iWARP runs over TCP).
/// Without a channel it is synchronous, as in librdmacm: it gets one of its own, and
/// each call that has an event waits for it and returns its outcome.
///
/// # Safety
/// `id` points to the caller's pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_create_id(
    ch: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() {
        return Errno::EINVAL.fail();
    }
    if ps != RDMA_PS_TCP {
        return unsupported("rdma_create_id", "iWARP has the TCP port space only").fail();
    }
    let sync = ch.is_null();
    let c = match sync {
        true => crate::cm_events::open(),
        false => channel(ch),
    };
    let Some(c) = c else {
        return if sync { -1 } else { Errno::EINVAL.fail() };
    };
    let new = new_id(c, context, ps, sync);
    // SAFETY: the caller's pointer, per this function's contract.
    unsafe { *id = new.ptr() };
    0
}

/// `rdma_destroy_id`: stops its listener or watch and ends its connection, and
/// acknowledges the event a synchronous call kept; `EINVAL` if it is not alive. As
/// librdmacm's, it returns once every event handed out for the identifier was
/// acknowledged, and none of its events is handed out after it (`cm_events::Owner`).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    let Some(i) = IDS.remove(id) else {
        return Errno::EINVAL.fail();
    };
    i.ack_held();
    i.events.end();
    let mut st = i.state();
    if let Some(t) = st.task.take() {
        t.abort();
    }
    st.incoming = None;
    drop(st);
    i.channel.ids.fetch_sub(1, Ordering::Relaxed);
    if i.sync {
        crate::cm_events::close_private(&i.channel);
    }
    0
}

/// `rdma_bind_addr`: the address a listener will listen on (port 0: any).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    let (Ok(i), Some(a)) = (id_of(id), from_c(addr)) else {
        return Errno::EINVAL.fail();
    };
    let mut st = i.state();
    st.src = Some(a);
    i.publish(&st);
    0
}

/// `rdma_resolve_addr`: the peer's address; the source is the local address its route
/// leaves from (or `src`). ADDR_RESOLVED follows.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    let (Ok(i), Some(d)) = (id_of(id), from_c(dst)) else {
        return Errno::EINVAL.fail();
    };
    let s = from_c(src).or_else(|| source_for(d));
    let mut st = i.state();
    st.dst = Some(d);
    st.src = s;
    i.publish(&st);
    drop(st);
    let event = match s {
        Some(_) => RDMA_CM_EVENT_ADDR_RESOLVED,
        None => RDMA_CM_EVENT_ADDR_ERROR,
    };
    i.post(What {
        event,
        status: if s.is_some() { 0 } else { -libc::ENETUNREACH },
        ..What::default()
    });
    i.complete()
}

/// The local address a connection to `dst` leaves from (port 0), as routing picks it.
fn source_for(dst: SocketAddr) -> Option<SocketAddr> {
    let any: SocketAddr = match dst {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(dst).ok()?;
    let mut a = s.local_addr().ok()?;
    a.set_port(0);
    Some(a)
}

/// `rdma_resolve_route`: ROUTE_RESOLVED follows (TCP routes for itself).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    let Ok(i) = id_of(id) else {
        return Errno::EINVAL.fail();
    };
    if i.state().dst.is_none() {
        return Errno::EINVAL.fail();
    }
    i.post(What {
        event: RDMA_CM_EVENT_ROUTE_RESOLVED,
        ..What::default()
    });
    i.complete()
}

/// `rdma_set_option`: the options that mean nothing more for iWARP over TCP than this
/// library does already are taken (0), as the kernel's connection manager takes them:
/// `RDMA_OPTION_ID_ACK_TIMEOUT` (InfiniBand's transport timer; TCP retransmits on its
/// own), `RDMA_OPTION_ID_REUSEADDR` (listeners reuse their address already) and
/// `RDMA_OPTION_ID_AFONLY` off (listeners on `::` take IPv4 too). The others (a type of
/// service, IPv6 only, InfiniBand paths) are refused with `EOPNOTSUPP`, naming the option.
///
/// # Safety
/// `optval` has `optlen` readable octets (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    if id_of(id).is_err() || optval.is_null() {
        return Errno::EINVAL.fail();
    }
    // SAFETY: `optlen` readable octets at `optval` (this function's contract).
    let val = unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen) };
    let off = val.iter().all(|&b| b == 0);
    match (level, optname) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT | RDMA_OPTION_ID_REUSEADDR) => 0,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) if off => 0,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => unsupported(
            "rdma_set_option(RDMA_OPTION_ID_AFONLY) on",
            "listeners on :: take IPv4 too here",
        )
        .fail(),
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => unsupported(
            "rdma_set_option(RDMA_OPTION_ID_TOS)",
            "the type of service is not applied to the TCP connection",
        )
        .fail(),
        _ => unsupported(
            "rdma_set_option of this level or option",
            "it is InfiniBand's (RDMA_OPTION_IB_PATH), or unknown",
        )
        .fail(),
    }
}

/// The private data of `param` (none if null).
///
/// # Safety
/// `param` is null or the caller's parameters, their private data readable.
unsafe fn private_of(param: *const rdma_conn_param) -> (Vec<u8>, u8, u8) {
    if param.is_null() {
        return (Vec::new(), 0, 0);
    }
    // SAFETY: the caller's parameters, per this function's contract.
    let p = unsafe { &*param };
    let data = match p.private_data.is_null() || p.private_data_len == 0 {
        true => Vec::new(),
        // SAFETY: `private_data_len` readable octets at `private_data` (the contract).
        false => unsafe {
            std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len as usize)
        }
        .to_vec(),
    };
    (data, p.responder_resources, p.initiator_depth)
}

/// `rdma_connect`: connects the identifier's queue pair to the resolved peer, with the
/// private data of `param`; ESTABLISHED, REJECTED or UNREACHABLE follows.
///
/// # Safety
/// `param` is null or the caller's parameters.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let Ok(i) = id_of(id) else {
        return Errno::EINVAL.fail();
    };
    let (Some(dst), Some(qp)) = ({
        let st = i.state();
        (st.dst, st.qp.clone())
    }) else {
        once(
            "rdma_connect",
            "resolve the address and create the queue pair first",
        );
        return Errno::EINVAL.fail();
    };
    // SAFETY: this function's contract.
    let (private, _, _) = unsafe { private_of(param) };
    let cfg = qp.config();
    let waits = i.clone();
    crate::rt::runtime().spawn(async move {
        let dev = qp.pd.device().clone();
        let until = tokio::time::Instant::now() + REFUSED_GRACE;
        loop {
            match dev.connect(&qp.pd.pd, dst, cfg.clone(), &private).await {
                Ok(c) => return established(&i, &qp, c.qp, c.private_data.to_vec()),
                Err(e)
                    if nobody_listens(&e)
                        && !i.events.is_gone()
                        && tokio::time::Instant::now() + REFUSED_RETRY < until =>
                {
                    tokio::time::sleep(REFUSED_RETRY).await;
                }
                Err(e) => return i.post(refused(&e)),
            }
        }
    });
    waits.complete()
}

/// How long a connection that TCP refused (nobody listens on the port yet) is tried
/// again before REJECTED. perftest connects its test connection right after the
/// handshake on its control connection, before a slower server listens (siw in a VM),
/// and its own retry reuses the identifiers it destroyed; a kernel RNIC fails at once.
const REFUSED_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
/// The pause between those tries.
const REFUSED_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether `e` is TCP's refusal: nobody listens on the port.
fn nobody_listens(e: &verbs::ConnectError) -> bool {
    matches!(e, verbs::ConnectError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// The event a failed connection gives, as librdmacm gives it on iWARP.
fn refused(e: &verbs::ConnectError) -> What {
    match e {
        verbs::ConnectError::Rejected { private_data, .. } => What {
            event: RDMA_CM_EVENT_REJECTED,
            status: -libc::ECONNREFUSED,
            private: private_data.to_vec(),
            ..What::default()
        },
        // Turned away before any MPA: no listener (refused), or a listener that closed
        // with the connection in its backlog (reset, nothing sent). librdmacm reports
        // both as a rejection, which programs retry (perftest does).
        e if nobody_listens(e) => What {
            event: RDMA_CM_EVENT_REJECTED,
            status: -libc::ECONNREFUSED,
            ..What::default()
        },
        verbs::ConnectError::NoFrame(n)
            if n.sent_len == 0
                && matches!(n.end, verbs::PeerEnd::Closed | verbs::PeerEnd::Reset) =>
        {
            What {
                event: RDMA_CM_EVENT_REJECTED,
                status: -libc::ECONNREFUSED,
                ..What::default()
            }
        }
        other => {
            once("rdma_connect", &other.to_string());
            What {
                event: RDMA_CM_EVENT_UNREACHABLE,
                status: -libc::ETIMEDOUT,
                ..What::default()
            }
        }
    }
}

/// The connection of `i` is up: its queue pair takes it, ESTABLISHED is posted, and a
/// watch posts DISCONNECTED when it ends.
fn established(i: &Arc<CmId>, qp: &Arc<Qp>, conn: verbs::Qp, private: Vec<u8>) {
    // Destroyed while it connected: nobody will use or end it.
    let qp_gone = crate::qp::queue_pair(qp.ibv().cast()).is_err();
    if i.events.is_gone() || qp_gone {
        conn.disconnect();
        return;
    }
    qp.up(conn.clone());
    let (ird, ord) = conn.ird_ord();
    i.post(What {
        event: RDMA_CM_EVENT_ESTABLISHED,
        private,
        ird: ird.min(255) as u8,
        ord: ord.min(255) as u8,
        ..What::default()
    });
    let watched = i.clone();
    // Not the queue pair itself: holding it would hold its shared receive queue, and so
    // its domain, busy past `ibv_destroy_qp` until the connection has ended.
    let (ctx, ptr, cqs) = (qp.pd.ctx().clone(), qp.ibv() as usize, qp.cqs());
    let watch = crate::rt::runtime().spawn(async move {
        let end = conn.closed().await;
        // An asynchronous event too, if it ended in error and the queue pair is alive.
        if crate::qp::queue_pair(ptr as *const c_void).is_ok() {
            ctx.events.ended(ptr, cqs, &end);
        }
        watched.post(What {
            event: RDMA_CM_EVENT_DISCONNECTED,
            ..What::default()
        });
    });
    i.state().task = Some(watch.abort_handle());
}

/// `rdma_listen`: listens on the bound address; each connection request makes a new
/// identifier, announced by CONNECT_REQUEST. At most `backlog` requests wait for the
/// program to take them (librdmacm's rule: 0 or less, or more than 1024, is 1024); one
/// beyond is rejected.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    let Ok(i) = id_of(id) else {
        return Errno::EINVAL.fail();
    };
    let Some(addr) = i.state().src else {
        once("rdma_listen", "bind an address first (rdma_bind_addr)");
        return Errno::EINVAL.fail();
    };
    let Some(ctx) = cm_context() else {
        return Errno::ENODEV.fail();
    };
    let Ok(c) = crate::device::context(ctx) else {
        return Errno::ENODEV.fail();
    };
    let listener = match crate::rt::block_on(c.device.listen(addr)) {
        Ok(l) => l,
        Err(e) => {
            once("rdma_listen", &format!("cannot listen on {addr}: {e}"));
            return Errno(e.raw_os_error().unwrap_or(libc::EADDRINUSE)).fail();
        }
    };
    i.events.listen(backlog);
    let mut st = i.state();
    st.src = Some(listener.local_addr());
    i.publish(&st);
    let parent = i.clone();
    let task = crate::rt::runtime().spawn(async move {
        while let Ok(inc) = listener.accept().await {
            request(&parent, listener.local_addr(), inc);
        }
    });
    st.task = Some(task.abort_handle());
    0
}

/// A connection request on listener `parent`: a new identifier holds it, announced by
/// CONNECT_REQUEST with the peer's private data.
fn request(parent: &Arc<CmId>, local: SocketAddr, inc: verbs::Incoming) {
    if parent.events.is_gone() {
        return;
    }
    if !parent.events.admit_request() {
        tracing::debug!(peer = %inc.peer_addr(), "listen backlog full: request rejected");
        crate::rt::runtime().spawn(async move { _ = inc.reject(&[]).await });
        return;
    }
    // SAFETY: reads the program's `context` word of the parent's C structure, which this
    // library wrote and the program may have set (rdma-core copies it to the child).
    let context = unsafe { (*parent.ptr()).context };
    // A synchronous listener's requests are synchronous too, each on a channel of its own
    // (librdmacm migrates them); the request itself is announced on the listener's.
    let channel = match parent.sync {
        true => match crate::cm_events::open() {
            Some(c) => c,
            None => {
                parent.events.request_gone();
                return;
            }
        },
        false => parent.channel.clone(),
    };
    let child = new_id(channel, context, RDMA_PS_TCP, parent.sync);
    let (ird, ord) = inc.peer_ird_ord();
    let private = inc.private_data().to_vec();
    {
        let mut st = child.state();
        st.src = Some(local);
        st.dst = Some(inc.peer_addr());
        st.incoming = Some(inc);
        child.publish(&st);
    }
    parent.channel.post(
        child.ptr(),
        parent.ptr(),
        &parent.events,
        What {
            event: RDMA_CM_EVENT_CONNECT_REQUEST,
            private,
            ird: ird.unwrap_or(0).min(255) as u8,
            ord: ord.unwrap_or(0).min(255) as u8,
            ..What::default()
        },
    );
}

/// `rdma_accept`: accepts the request this identifier holds, on its queue pair, with the
/// private data of `param`; ESTABLISHED (or CONNECT_ERROR) follows.
///
/// # Safety
/// `param` is null or the caller's parameters.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    let Ok(i) = id_of(id) else {
        return Errno::EINVAL.fail();
    };
    let (inc, qp) = {
        let mut st = i.state();
        (st.incoming.take(), st.qp.clone())
    };
    let (Some(inc), Some(qp)) = (inc, qp) else {
        once(
            "rdma_accept",
            "accept a connection request, after rdma_create_qp on its identifier",
        );
        return Errno::EINVAL.fail();
    };
    // SAFETY: this function's contract.
    let (private, _, _) = unsafe { private_of(param) };
    let cfg = qp.config();
    let waits = i.clone();
    crate::rt::runtime().spawn(async move {
        match inc.accept(&qp.pd.pd, cfg, &private).await {
            Ok(conn) => established(&i, &qp, conn, Vec::new()),
            Err(e) => {
                once("rdma_accept", &e.to_string());
                i.post(What {
                    event: RDMA_CM_EVENT_CONNECT_ERROR,
                    status: -libc::ECONNRESET,
                    ..What::default()
                });
            }
        }
    });
    waits.complete()
}

/// `rdma_reject`: refuses the request this identifier holds, with `private` data.
///
/// # Safety
/// `private` has `len` readable octets (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private: *const c_void,
    len: u8,
) -> c_int {
    let Ok(i) = id_of(id) else {
        return Errno::EINVAL.fail();
    };
    let Some(inc) = i.state().incoming.take() else {
        return Errno::EINVAL.fail();
    };
    let data = match private.is_null() {
        true => Vec::new(),
        // SAFETY: `len` readable octets, per this function's contract.
        false => unsafe { std::slice::from_raw_parts(private.cast::<u8>(), len as usize) }.to_vec(),
    };
    crate::rt::runtime().spawn(async move {
        let _ = inc.reject(&data).await;
    });
    0
}

/// `rdma_disconnect`: ends the connection; DISCONNECTED follows on both sides (a
/// synchronous identifier waits for it).
#[unsafe(no_mangle)]
pub extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    let Ok(i) = id_of(id) else {
        return Errno::EINVAL.fail();
    };
    let qp = i.state().qp.clone();
    match qp {
        Some(qp) => {
            qp.disconnect();
            // A synchronous identifier waits for DISCONNECTED, once, if it connected.
            let wait = i.sync && !std::mem::replace(&mut i.state().disconnecting, true);
            match wait && i.state().task.is_some() {
                true => i.complete(),
                false => 0,
            }
        }
        None => Errno::EINVAL.fail(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turned_away(end: verbs::PeerEnd, sent: &'static [u8]) -> verbs::ConnectError {
        verbs::ConnectError::NoFrame(verbs::NoFrame {
            role: mpa::Role::Initiator,
            end,
            sent: verbs::bytes::Bytes::from_static(sent),
            sent_len: sent.len(),
        })
    }

    /// How a failed connect is reported: turned away before any MPA (refused, or closed
    /// or reset with nothing sent) is a rejection, which programs retry; an MPA reject
    /// carries its private data; anything else (a silent peer, another protocol) is
    /// unreachable.
    #[test]
    fn connect_failures_map_to_librdmacm_events() {
        let event = |e: verbs::ConnectError| {
            let w = refused(&e);
            (w.event, w.status, w.private)
        };
        let refused_io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let rejected = (RDMA_CM_EVENT_REJECTED, -libc::ECONNREFUSED, Vec::new());
        assert_eq!(event(verbs::ConnectError::Io(refused_io)), rejected);
        assert_eq!(event(turned_away(verbs::PeerEnd::Reset, b"")), rejected);
        assert_eq!(event(turned_away(verbs::PeerEnd::Closed, b"")), rejected);
        let reject = verbs::ConnectError::Rejected {
            private_data: verbs::bytes::Bytes::from_static(b"no"),
            refused: verbs::Refused { crc: false },
        };
        let with_data = (RDMA_CM_EVENT_REJECTED, -libc::ECONNREFUSED, b"no".to_vec());
        assert_eq!(event(reject), with_data);
        let unreachable = (RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT, Vec::new());
        assert_eq!(
            event(turned_away(verbs::PeerEnd::Reset, b"HTTP")),
            unreachable
        );
        let silent = verbs::PeerEnd::Silent(std::time::Duration::from_secs(1));
        assert_eq!(event(turned_away(silent, b"")), unreachable);
    }
}
