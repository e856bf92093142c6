//! C socket addresses and Rust's.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage};

/// The address at `a` (IPv4 or IPv6), or `None` for null or another family.
pub(crate) fn from_c(a: *const sockaddr) -> Option<SocketAddr> {
    if a.is_null() {
        return None;
    }
    // SAFETY: a non-null sockaddr from the program: its family word says what follows,
    // and only that family's structure is read.
    unsafe {
        match i32::from((*a).sa_family) {
            libc::AF_INET => {
                let s = &*a.cast::<sockaddr_in>();
                let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
                Some(SocketAddr::from((ip, u16::from_be(s.sin_port))))
            }
            libc::AF_INET6 => {
                let s = &*a.cast::<sockaddr_in6>();
                let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
                let port = u16::from_be(s.sin6_port);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    port,
                    s.sin6_flowinfo,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// `a` as a C `sockaddr_storage`.
pub(crate) fn to_c(a: SocketAddr) -> sockaddr_storage {
    // SAFETY: sockaddr_storage is plain C data: all zeroes is its empty value.
    let mut out: sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_in fits in (and is aligned within) sockaddr_storage.
            let s = unsafe { &mut *(&mut out as *mut sockaddr_storage).cast::<sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_in6 fits in (and is aligned within) sockaddr_storage.
            let s = unsafe { &mut *(&mut out as *mut sockaddr_storage).cast::<sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for a in ["10.1.2.3:7174", "[fe80::1]:18515", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            let c = to_c(a);
            assert_eq!(from_c((&c as *const sockaddr_storage).cast()), Some(a));
        }
        assert_eq!(from_c(std::ptr::null()), None);
    }
}
