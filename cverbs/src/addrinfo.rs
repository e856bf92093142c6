//! `rdma_getaddrinfo` and `rdma_freeaddrinfo`: getaddrinfo(3) for the connection manager.
//! Each address found becomes one entry: the source (with `RAI_PASSIVE`, to listen on) or
//! the destination, TCP port space, reliable connected.

use std::net::SocketAddr;

use libc::{c_char, c_int, sockaddr, sockaddr_storage};

use crate::abi::IBV_QPT_RC;
use crate::cm_abi::*;
use crate::errors::Errno;
use crate::sockaddr::{from_c, to_c};

/// `rdma_getaddrinfo`: 0 and a list in `res`, or -1 with errno.
///
/// # Safety
/// `node` and `service` are null or C strings; `hints` is null or the caller's hints;
/// `res` points to the caller's pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    if res.is_null() || (node.is_null() && service.is_null()) {
        return Errno::EINVAL.fail();
    }
    // SAFETY: the caller's hints, if any (this function's contract).
    let (flags, family) = match unsafe { hints.as_ref() } {
        Some(h) => (h.ai_flags, h.ai_family),
        None => (0, 0),
    };
    // SAFETY: as getaddrinfo(3): C strings or null, and zeroed hints of our own.
    let found = unsafe { lookup(node, service, family, flags & RAI_PASSIVE != 0) };
    let Some(addrs) = found.filter(|a| !a.is_empty()) else {
        return Errno(libc::EADDRNOTAVAIL).fail();
    };
    let mut head: *mut rdma_addrinfo = std::ptr::null_mut();
    for a in addrs.into_iter().rev() {
        let entry = entry(a, flags & RAI_PASSIVE != 0, head);
        if entry.is_null() {
            // SAFETY: the entries made so far, freed as rdma_freeaddrinfo frees them.
            unsafe { rdma_freeaddrinfo(head) };
            return Errno::ENOMEM.fail();
        }
        head = entry;
    }
    // SAFETY: the caller's pointer, per this function's contract.
    unsafe { *res = head };
    0
}

/// The addresses getaddrinfo(3) finds for `node`/`service` (stream sockets).
///
/// # Safety
/// `node` and `service` are null or C strings.
unsafe fn lookup(
    node: *const c_char,
    service: *const c_char,
    family: c_int,
    passive: bool,
) -> Option<Vec<SocketAddr>> {
    // SAFETY: addrinfo is plain C data: all zeroes is its empty value.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = family;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_flags = if passive { libc::AI_PASSIVE } else { 0 };
    let mut list: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: C strings or null (the caller's contract), our hints, and a list pointer
    // freed below with freeaddrinfo.
    if unsafe { libc::getaddrinfo(node, service, &hints, &mut list) } != 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut at = list;
    while !at.is_null() {
        // SAFETY: a node of the list getaddrinfo made, not yet freed.
        let ai = unsafe { &*at };
        out.extend(from_c(ai.ai_addr));
        at = ai.ai_next;
    }
    // SAFETY: the list getaddrinfo made, freed once.
    unsafe { libc::freeaddrinfo(list) };
    Some(out)
}

/// One entry for `a`, before `next`, allocated with malloc(3) (null if out of memory).
fn entry(a: SocketAddr, passive: bool, next: *mut rdma_addrinfo) -> *mut rdma_addrinfo {
    let len = match a {
        SocketAddr::V4(_) => size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => size_of::<libc::sockaddr_in6>(),
    };
    // SAFETY: calloc of one entry and one address; both checked, freed by
    // rdma_freeaddrinfo.
    let (e, s) = unsafe {
        (
            libc::calloc(1, size_of::<rdma_addrinfo>()).cast::<rdma_addrinfo>(),
            libc::calloc(1, size_of::<sockaddr_storage>()).cast::<sockaddr_storage>(),
        )
    };
    if e.is_null() || s.is_null() {
        // SAFETY: free(3) of what calloc returned (or null).
        unsafe { (libc::free(e.cast()), libc::free(s.cast())) };
        return std::ptr::null_mut();
    }
    // SAFETY: `s` and `e` are fresh, zeroed allocations of their types' sizes.
    unsafe {
        s.write(to_c(a));
        let e = &mut *e;
        e.ai_family = if a.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        e.ai_qp_type = IBV_QPT_RC;
        e.ai_port_space = RDMA_PS_TCP;
        e.ai_next = next;
        if passive {
            e.ai_flags = RAI_PASSIVE;
            e.ai_src_addr = s.cast::<sockaddr>();
            e.ai_src_len = len as libc::socklen_t;
        } else {
            e.ai_dst_addr = s.cast::<sockaddr>();
            e.ai_dst_len = len as libc::socklen_t;
        }
    }
    e
}

/// `rdma_freeaddrinfo`: frees a list `rdma_getaddrinfo` made.
///
/// # Safety
/// `res` is null or such a list, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut at = res;
    while !at.is_null() {
        // SAFETY: an entry of a list this library made (the contract), freed once: its
        // address and canonical names were calloc'ed or are null.
        unsafe {
            let e = &*at;
            let next = e.ai_next;
            for p in [
                e.ai_src_addr.cast::<libc::c_void>(),
                e.ai_dst_addr.cast(),
                e.ai_src_canonname.cast(),
                e.ai_dst_canonname.cast(),
            ] {
                libc::free(p);
            }
            libc::free(at.cast());
            at = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_numeric_address_resolves_to_one_destination() {
        let mut res = std::ptr::null_mut();
        // SAFETY: C strings and a result pointer of this test's.
        let rc = unsafe {
            rdma_getaddrinfo(
                c"127.0.0.1".as_ptr(),
                c"18515".as_ptr(),
                std::ptr::null(),
                &mut res,
            )
        };
        assert_eq!(rc, 0);
        // SAFETY: the list just made.
        let e = unsafe { &*res };
        assert_eq!(
            from_c(e.ai_dst_addr),
            Some("127.0.0.1:18515".parse().unwrap())
        );
        assert!(e.ai_src_addr.is_null() && e.ai_port_space == RDMA_PS_TCP);
        // SAFETY: freed once.
        unsafe { rdma_freeaddrinfo(res) };
    }
}
