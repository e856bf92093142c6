//! Opening and closing a context: `ibv_open_device` gives each new context the
//! operation table (`ops`) and the stack every context of this process shares; and the
//! context the connection manager (`cm`) opens for itself.

use std::sync::OnceLock;

use libc::c_int;

use crate::abi::*;
use crate::device::{CONTEXTS, Context, QUEUE_DEPTH, ours};
use crate::errors::{Errno, set_errno};

/// The stack every context of this process uses, opened on first use: one engine (or one
/// attachment to iwarpd) per process, as one adapter serves every context opened on it,
/// so that a domain of one context and a connection of another (the connection manager's)
/// meet. `None` (the reason on stderr, once) if it cannot be reached.
fn stack() -> Option<verbs::Device> {
    static STACK: OnceLock<Option<verbs::Device>> = OnceLock::new();
    STACK
        .get_or_init(|| {
            // Peer-to-peer MPA (RFC 6581), as siw: the initiator sends a ready-to-receive
            // message after the handshake, so the responder may send first (perftest's
            // write_lat server does); without it, iWARP holds the responder's first message
            // until the initiator has sent one. A peer that does not ask gets plain MPA.
            let rtr = verbs::RtrFlags::WRITE | verbs::RtrFlags::READ;
            let cfg = verbs::DeviceConfig::default()
                .queue_depths(QUEUE_DEPTH, QUEUE_DEPTH)
                .p2p(true, rtr);
            verbs::Device::open(cfg)
                .inspect_err(|e| eprintln!("iwarp verbs: ibv_open_device: {e}"))
                .ok()
        })
        .clone()
}

/// `ibv_open_device`: a new context on the device, over the stack the environment names
/// (`IWARP_DEVICE=unix:PATH` for a local iwarpd; otherwise the engine in this process).
/// Null, with errno `ENODEV` and the reason on stderr, when that stack cannot be reached.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let Some(d) = ours(dev) else {
        set_errno(Errno::ENODEV);
        return std::ptr::null_mut();
    };
    let Some(device) = stack() else {
        set_errno(Errno::ENODEV);
        return std::ptr::null_mut();
    };
    let Ok(events) = crate::async_events::AsyncEvents::new() else {
        return std::ptr::null_mut();
    };
    let ptr = CONTEXTS.add(Context {
        ibv: ibv_context {
            device: &d.ibv as *const ibv_device as *mut ibv_device,
            ops: crate::ops::table(),
            cmd_fd: -1,
            async_fd: events.raw(),
            num_comp_vectors: 1,
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            abi_compat: std::ptr::null_mut(),
        },
        device,
        domains: Default::default(),
        events,
    });
    ptr.cast()
}

/// `ibv_close_device`: 0; -1 with `EINVAL` for a context that is not open (closed
/// twice, or never this library's: refused, not freed again), or `EBUSY` while it still
/// has protection domains.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    let busy = |c: &Context| c.domains.load(std::sync::atomic::Ordering::Relaxed) > 0;
    match CONTEXTS.remove_unless(ctx, busy) {
        Ok(_) => 0,
        Err(true) => Errno::EBUSY.fail(),
        Err(false) => Errno::EINVAL.fail(),
    }
}

/// The context every identifier's `verbs` names, opened on first use (null if the stack
/// cannot be reached).
pub(crate) fn cm_context() -> Option<*mut ibv_context> {
    static CTX: OnceLock<usize> = OnceLock::new();
    let ctx = *CTX.get_or_init(|| {
        let dev = &crate::device::device().ibv as *const ibv_device as *mut ibv_device;
        ibv_open_device(dev) as usize
    });
    (ctx != 0).then_some(ctx as *mut ibv_context)
}
