//! The names rdma-core gives its enumerations, and `rpoll`.

use libc::{c_char, c_int, nfds_t, pollfd};
use std::ffi::CStr;

/// `ibv_wc_status_str`: a completion status in rdma-core's words.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const NAMES: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    name(&NAMES, status, c"unknown")
}

/// `rdma_event_str`: a connection-manager event's name, as librdmacm spells it.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&CStr; 16] = [
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    name(&NAMES, event, c"UNKNOWN EVENT")
}

fn name(names: &[&'static CStr], i: c_int, unknown: &'static CStr) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| names.get(i))
        .map_or(unknown.as_ptr(), |n| n.as_ptr())
}

/// `rpoll` (librdmacm's poll over rsockets and ordinary descriptors): this library makes
/// no rsockets, so every descriptor is an ordinary one and this is poll(2).
///
/// # Safety
/// As poll(2): `fds` points to `nfds` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's array, per poll(2)'s contract, which is this function's.
    unsafe { libc::poll(fds, nfds, timeout) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_out_of_range() {
        // SAFETY: both return static C strings.
        let s = |p| unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
        assert_eq!(s(ibv_wc_status_str(99)), "unknown");
        assert_eq!(s(rdma_event_str(9)), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(s(rdma_event_str(-1)), "UNKNOWN EVENT");
    }
}
