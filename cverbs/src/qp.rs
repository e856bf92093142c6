//! Queue pairs: made by `rdma_create_qp` (iWARP connects only through the connection
//! manager), posted to through the context's table (`ibv_post_send`, `ibv_post_recv`),
//! destroyed by `ibv_destroy_qp` or `rdma_destroy_qp`.
//!
//! Until its connection is up, a queue pair keeps the receives posted to it and hands
//! them to the connection as it starts (as rping posts its first receive before it
//! connects); sends are refused until then, as a queue pair not yet in RTS refuses them.

use std::cell::UnsafeCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use libc::{c_int, c_void};
use verbs::{Payload, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr};

use crate::abi::*;
use crate::cq::{Cq, queue};
use crate::errors::{Errno, once};
use crate::live::Live;
use crate::memory::{Pd, domain};
use crate::post::{MAX_SGE, not_posted, post_errno, post_recvs, sgl};
use crate::srq::{Srq, shared_queue};

static QPS: Live<Qp> = Live::new();

/// The most octets of an `IBV_SEND_INLINE` request (copied when posted).
const MAX_INLINE: u32 = 4096;
/// A queue pair.
#[repr(C)]
pub(crate) struct Qp {
    ibv: UnsafeCell<ibv_qp>,
    pub(crate) pd: Arc<Pd>,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    /// The shared receive queue it draws on, if any.
    srq: Option<Arc<Srq>>,
    /// Every send request completes (`sq_sig_all`).
    sig_all: bool,
    /// The capabilities it was made with (`ibv_query_qp`).
    cap: ibv_qp_cap,
    conn: Mutex<Conn>,
}

/// Where a queue pair's connection is.
enum Conn {
    /// Not up yet: the receives posted so far.
    Pending(Vec<RecvWr>),
    /// Up (or ended: the stack then completes what is posted as flushed).
    Up(verbs::Qp),
}

// SAFETY: the pointers in `ibv` are addresses handed to C (the context, domain and queues
// this queue pair holds alive, and the program's `qp_context`); Rust writes only the
// `qp_num` and `state` words, under `conn`'s lock, and never the pthread fields.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    /// Its connection's settings: its queues, and the receives posted so far (taken).
    pub(crate) fn config(&self) -> verbs::QpConfig {
        let mut cfg = verbs::QpConfig::new(&self.send_cq.cq).recv_cq(&self.recv_cq.cq);
        if let Some(srq) = &self.srq {
            cfg = cfg.srq(&srq.srq);
        }
        if let Conn::Pending(recvs) = &mut *self.conn() {
            for wr in recvs.drain(..) {
                cfg = cfg.recv(wr);
            }
        }
        cfg
    }

    /// Its connection is up as `qp`: receives posted meanwhile go to it, and polls of its
    /// queues read its socket.
    pub(crate) fn up(&self, qp: verbs::Qp) {
        for cq in [&self.send_cq, &self.recv_cq] {
            let mut inputs = cq.inputs.lock().unwrap_or_else(|e| e.into_inner());
            if !inputs.iter().any(|q| q.num() == qp.num()) {
                inputs.push(qp.clone());
            }
        }
        let mut conn = self.conn();
        if let Conn::Pending(recvs) = &mut *conn {
            for wr in recvs.drain(..) {
                let _ = qp.post_recv(wr);
            }
        }
        // SAFETY: the words C reads, written under the lock (see the Sync note).
        unsafe {
            (*self.ibv.get()).qp_num = qp.num().0;
            (*self.ibv.get()).state = IBV_QPS_RTS;
        }
        *conn = Conn::Up(qp);
    }

    /// Ends its connection (a disconnect, or its destruction).
    pub(crate) fn disconnect(&self) {
        if let Conn::Up(qp) = &*self.conn() {
            qp.disconnect();
        }
    }

    /// Whether a request with send flags `flags` completes (`IBV_SEND_SIGNALED`, or a
    /// queue pair that signals all).
    pub(crate) fn signals(&self, flags: libc::c_uint) -> bool {
        self.sig_all || flags & IBV_SEND_SIGNALED != 0
    }

    /// Posts a request this library makes for the program (a type 1 bind's completion):
    /// `EINVAL` before the connection is up.
    pub(crate) fn post_local(&self, wr: SendWr) -> Result<(), Errno> {
        match &*self.conn() {
            Conn::Up(conn) => conn.post_send(wr).map_err(|e| Errno(post_errno(&e))),
            Conn::Pending(_) => {
                once(
                    "ibv_bind_mw",
                    "a signaled bind needs its queue pair connected (its completion goes there)",
                );
                Err(Errno::EINVAL)
            }
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its completion queues' C addresses (send, receive).
    pub(crate) fn cqs(&self) -> [usize; 2] {
        // SAFETY: words written once, at creation.
        let ibv = unsafe { &*self.ibv.get() };
        [ibv.send_cq as usize, ibv.recv_cq as usize]
    }

    /// The C structure's address.
    pub(crate) fn ibv(&self) -> *mut ibv_qp {
        self.ibv.get()
    }
}

/// The queue pair behind `qp`, if it is alive.
pub(crate) fn queue_pair(qp: *const c_void) -> Result<Arc<Qp>, Errno> {
    QPS.get(qp).ok_or(Errno::EINVAL)
}

/// Makes a queue pair in `pd` with `attr` (whose capabilities are updated to what it
/// got), for the connection manager.
pub(crate) fn create(pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Result<Arc<Qp>, Errno> {
    let p = domain(pd)?;
    if attr.qp_type != IBV_QPT_RC {
        let why = "iWARP has reliable connected queue pairs (IBV_QPT_RC) only";
        return Err(crate::errors::unsupported(
            "ibv_create_qp of this type",
            why,
        ));
    }
    let send_cq = queue(attr.send_cq.cast())?;
    let recv_cq = queue(attr.recv_cq.cast())?;
    let srq = match attr.srq.is_null() {
        true => None,
        false => Some(shared_queue(attr.srq.cast())?),
    };
    let c = &attr.cap;
    let depth = crate::device::QUEUE_DEPTH as u32;
    if c.max_send_wr > depth || c.max_recv_wr > depth || c.max_inline_data > MAX_INLINE {
        once(
            "ibv_create_qp",
            &format!("at most {depth} requests per queue and {MAX_INLINE} inline octets"),
        );
        return Err(Errno::EINVAL);
    }
    send_cq.users.fetch_add(1, Ordering::Relaxed);
    recv_cq.users.fetch_add(1, Ordering::Relaxed);
    if let Some(q) = &srq {
        q.users.fetch_add(1, Ordering::Relaxed);
    }
    p.users.fetch_add(1, Ordering::Relaxed);
    let ibv = ibv_qp {
        context: p.context(),
        qp_context: attr.qp_context,
        pd,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        handle: 0,
        qp_num: 0,
        state: IBV_QPS_INIT,
        qp_type: IBV_QPT_RC,
        mutex: libc::PTHREAD_MUTEX_INITIALIZER,
        cond: libc::PTHREAD_COND_INITIALIZER,
        events_completed: 0,
    };
    let ptr = QPS.add(Qp {
        ibv: UnsafeCell::new(ibv),
        pd: p,
        send_cq,
        recv_cq,
        srq,
        sig_all: attr.sq_sig_all != 0,
        cap: attr.cap,
        conn: Mutex::new(Conn::Pending(Vec::new())),
    });
    queue_pair(ptr.cast())
}

/// `ibv_query_qp`: its state, path MTU and capabilities into `attr`, and the attributes
/// it was made with into `init_attr` (everything, whatever `mask` asks); `EINVAL` if it is
/// not alive.
///
/// # Safety
/// `attr` and `init_attr` point to the caller's structures.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let Ok(q) = queue_pair(qp.cast()) else {
        return Errno::EINVAL.code();
    };
    if attr.is_null() || init_attr.is_null() {
        return Errno::EINVAL.code();
    }
    let (state, ibv) = {
        let _conn = q.conn();
        // SAFETY: the words this library writes under `conn`'s lock (see the Sync note),
        // and the rest, written once at creation.
        let ibv = unsafe { &*q.ibv.get() };
        (
            ibv.state,
            (ibv.qp_context, ibv.send_cq, ibv.recv_cq, ibv.srq),
        )
    };
    let got = ibv_qp_attr {
        qp_state: state,
        cur_qp_state: state,
        path_mtu: crate::device::mtu_enum(crate::device::device().iface.mtu),
        cap: q.cap,
        port_num: 1,
        ..ibv_qp_attr::default()
    };
    // SAFETY: the caller's structures, per this function's contract.
    unsafe {
        attr.write(got);
        init_attr.write(ibv_qp_init_attr {
            qp_context: ibv.0,
            send_cq: ibv.1,
            recv_cq: ibv.2,
            srq: ibv.3,
            cap: q.cap,
            qp_type: IBV_QPT_RC,
            sq_sig_all: c_int::from(q.sig_all),
        });
    }
    0
}

/// `ibv_destroy_qp`: ends its connection and frees it, and its queues and domain may go
/// (even while a task of the library still holds it a moment); `EINVAL` if it is not
/// alive.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    match QPS.remove(qp) {
        Some(q) => {
            q.disconnect();
            if let Conn::Up(up) = &*q.conn() {
                for cq in [&q.send_cq, &q.recv_cq] {
                    let mut inputs = cq.inputs.lock().unwrap_or_else(|e| e.into_inner());
                    inputs.retain(|other| other.num() != up.num());
                }
            }
            q.send_cq.users.fetch_sub(1, Ordering::Relaxed);
            q.recv_cq.users.fetch_sub(1, Ordering::Relaxed);
            if let Some(s) = &q.srq {
                s.users.fetch_sub(1, Ordering::Relaxed);
            }
            q.pd.users.fetch_sub(1, Ordering::Relaxed);
            0
        }
        None => Errno::EINVAL.code(),
    }
}

/// `ibv_modify_qp`. A queue pair of the connection manager moves through INIT, RTR and
/// RTS as its connection does, so those are accepted and change nothing; to ERR it is
/// disconnected (its work flushed). Other attributes are what the connection negotiated
/// and are left so. Only the state word (the attributes' first) is read.
///
/// # Safety
/// `attr` points to the caller's `struct ibv_qp_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut c_int, mask: c_int) -> c_int {
    const IBV_QP_STATE: c_int = 1;
    let Ok(q) = queue_pair(qp.cast()) else {
        return Errno::EINVAL.code();
    };
    if attr.is_null() {
        return Errno::EINVAL.code();
    }
    if mask & IBV_QP_STATE == 0 {
        return 0;
    }
    // SAFETY: `qp_state` is the first field of the caller's attributes (the contract).
    match unsafe { attr.read() } {
        IBV_QPS_ERR => {
            q.disconnect();
            let _conn = q.conn();
            // SAFETY: the state word C reads, written under the lock.
            unsafe { (*q.ibv.get()).state = IBV_QPS_ERR };
            0
        }
        IBV_QPS_INIT..=IBV_QPS_RTS => 0,
        _ => {
            crate::errors::unsupported(
                "ibv_modify_qp to this state",
                "a queue pair of the connection manager goes to INIT, RTR, RTS or ERR only",
            )
            .0
        }
    }
}

/// The octets an inline request gathers, copied now.
///
/// # Safety
/// Each entry names octets of the program's that are readable now.
unsafe fn inline(sg: *const ibv_sge, n: c_int) -> Result<Payload, Errno> {
    let n = usize::try_from(n).map_err(|_| Errno::EINVAL)?;
    if n > MAX_SGE || (n > 0 && sg.is_null()) {
        return Err(Errno::EINVAL);
    }
    let mut data = Vec::new();
    if n > 0 {
        // SAFETY: the caller's `n` entries.
        let list = unsafe { std::slice::from_raw_parts(sg, n) };
        for s in list {
            if data.len() + s.length as usize > MAX_INLINE as usize {
                return Err(Errno::EINVAL);
            }
            // SAFETY: the program's readable octets (this function's contract: an inline
            // request's data is read when it is posted, as rdma-core's providers do).
            let octets =
                unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            data.extend_from_slice(octets);
        }
    }
    Ok(Payload::Bytes(data.into()))
}

/// One C send request as the stack's.
///
/// # Safety
/// `wr` is the caller's valid request (its list and, if inline, its octets).
unsafe fn send_wr(wr: &ibv_send_wr, sig_all: bool) -> Result<SendWr, Errno> {
    let mut flags = SendFlags::NONE;
    for (bit, f) in [
        (IBV_SEND_SOLICITED, SendFlags::SOLICITED),
        (IBV_SEND_FENCE, SendFlags::FENCE),
    ] {
        if wr.send_flags & bit != 0 {
            flags = flags | f;
        }
    }
    if sig_all || wr.send_flags & IBV_SEND_SIGNALED != 0 {
        flags = flags | SendFlags::SIGNALED;
    }
    // SAFETY: the caller's list (and octets), per this function's contract.
    let data = || unsafe {
        match wr.send_flags & IBV_SEND_INLINE != 0 {
            true => inline(wr.sg_list, wr.num_sge),
            false => sgl(wr.sg_list, wr.num_sge).map(Payload::Sgl),
        }
    };
    // SAFETY: the union's members are plain integers: any bits are a value of each.
    let (rdma, atomic) = unsafe { (wr.wr.rdma, wr.wr.atomic) };
    let remote = |len| RemoteBuf {
        stag: STag::from(rdma.rkey),
        to: rdma.remote_addr,
        len,
    };
    let op = match wr.opcode {
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV => SendOp::Send {
            data: data()?,
            immediate: (wr.opcode == IBV_WR_SEND_WITH_IMM).then(|| u32::from_be(wr.imm_data)),
            invalidate: (wr.opcode == IBV_WR_SEND_WITH_INV).then(|| STag::from(wr.imm_data)),
        },
        IBV_WR_RDMA_WRITE => {
            let data = data()?;
            let len = data.len().ok_or(Errno::EINVAL)?;
            SendOp::Write {
                data,
                dst: remote(len),
            }
        }
        IBV_WR_RDMA_READ => {
            // SAFETY: the caller's list.
            let dst = unsafe { sgl(wr.sg_list, wr.num_sge)? };
            let len = dst.iter().map(|s| s.len).sum();
            // One sink entry is an RFC 5040 Read; more need this stack's Read V2 (the
            // stack refuses them to a peer that did not agree to it).
            match (dst.len(), dst.iter().next()) {
                (1, Some(&sink)) => SendOp::Read {
                    src: remote(len),
                    dst: sink,
                },
                _ => SendOp::ReadSgl {
                    src: remote(len),
                    dst,
                },
            }
        }
        IBV_WR_BIND_MW => crate::mw::bind_request(&wr.bind_mw)?,
        IBV_WR_ATOMIC_FETCH_AND_ADD | IBV_WR_ATOMIC_CMP_AND_SWP => {
            // SAFETY: the caller's list.
            let result = unsafe { sgl(wr.sg_list, wr.num_sge)? }
                .iter()
                .next()
                .copied()
                .ok_or(Errno::EINVAL)?;
            let dst = RemoteBuf {
                stag: STag::from(atomic.rkey),
                to: atomic.remote_addr,
                len: 8,
            };
            match wr.opcode {
                IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
                    dst,
                    add: atomic.compare_add,
                    mask: 0,
                    result,
                },
                _ => SendOp::CmpSwap {
                    dst,
                    compare: atomic.compare_add,
                    compare_mask: u64::MAX,
                    swap: atomic.swap,
                    swap_mask: u64::MAX,
                    result,
                },
            }
        }
        IBV_WR_LOCAL_INV => SendOp::LocalInvalidate {
            stag: STag::from(wr.imm_data),
        },
        other => {
            let why = match other {
                IBV_WR_RDMA_WRITE_WITH_IMM => {
                    "RDMA Write with Immediate Data is not an iWARP operation (RFC 7306 has \
                     Immediate Data as a message of its own)"
                }
                _ => "this operation is not carried out by this library",
            };
            return Err(crate::errors::unsupported("ibv_post_send opcode", why));
        }
    };
    Ok(SendWr {
        wr_id: wr.wr_id,
        op,
        flags,
    })
}

/// The context's `post_send`.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut c_void,
    wr: *mut c_void,
    bad: *mut *mut c_void,
) -> c_int {
    let fail = |at: *mut c_void, e: c_int| not_posted(bad, at, e);
    let Ok(q) = queue_pair(qp) else {
        return fail(wr, libc::EINVAL);
    };
    let Conn::Up(conn) = &*q.conn() else {
        once(
            "ibv_post_send",
            "the queue pair is not connected yet (no send before RTS)",
        );
        return fail(wr, libc::EINVAL);
    };
    let conn = conn.clone();
    let mut at = wr.cast::<ibv_send_wr>();
    while !at.is_null() {
        // SAFETY: the program's request list, valid for this call (rdma-core's contract).
        let w = unsafe { &*at };
        // SAFETY: as above: its lists and inline octets.
        let posted = match unsafe { send_wr(w, q.sig_all) } {
            Ok(swr) => {
                tracing::trace!(qp = %conn.num(), wr = ?swr, "ibv_post_send");
                conn.post_send(swr).map_err(|e| post_errno(&e))
            }
            Err(e) => Err(e.0),
        };
        if let Err(e) = posted {
            return fail(at.cast(), e);
        }
        at = w.next;
    }
    0
}

/// The context's `post_recv`.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut c_void,
    wr: *mut c_void,
    bad: *mut *mut c_void,
) -> c_int {
    let Ok(q) = queue_pair(qp) else {
        return not_posted(bad, wr, libc::EINVAL);
    };
    let mut conn = q.conn();
    // SAFETY: the program's request list, valid for this call (rdma-core's contract).
    unsafe {
        post_recvs(wr, bad, |rwr| match &mut *conn {
            Conn::Pending(recvs) => {
                recvs.push(rwr);
                Ok(())
            }
            Conn::Up(qp) => qp.post_recv(rwr).map_err(|e| post_errno(&e)),
        })
    }
}
