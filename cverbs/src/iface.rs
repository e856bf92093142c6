//! The interface the device stands for: its IPv4 address, MAC address, MTU and index.

use std::ffi::CStr;
use std::net::Ipv4Addr;

/// Loopback, when nothing else is up.
const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// One network interface, as the device reports it.
#[derive(Debug, Clone)]
pub(crate) struct Iface {
    /// Its name (`eth0`).
    pub(crate) name: String,
    /// Its IPv4 address: the GID.
    pub(crate) addr: Ipv4Addr,
    /// Its MAC address, if it has one: the node GUID.
    pub(crate) mac: Option<[u8; 6]>,
    /// Its MTU: the port's MTU.
    pub(crate) mtu: u32,
    /// Its index (`if_nametoindex`).
    pub(crate) index: u32,
}

impl Iface {
    /// The interface named by `IWARP_IFACE`, else the first one up, not loopback, with
    /// an IPv4 address, else loopback.
    pub(crate) fn primary() -> Self {
        let all = up_ipv4();
        let wanted = std::env::var("IWARP_IFACE").ok();
        let pick = match &wanted {
            Some(name) => all.iter().find(|(n, _, _)| n == name),
            None => all.iter().find(|(_, _, lo)| !lo),
        };
        let (name, addr) = pick
            .map(|(n, a, _)| (n.clone(), *a))
            .unwrap_or_else(|| ("lo".to_owned(), LOOPBACK));
        let sys = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{name}/{f}"));
        let mac = sys("address").ok().and_then(|s| parse_mac(s.trim()));
        let mtu = sys("mtu")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1500);
        let index = sys("ifindex")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        Self {
            name,
            addr,
            mac,
            mtu,
            index,
        }
    }
}

/// A MAC address `aa:bb:cc:dd:ee:ff`; `None` for all zeroes (loopback) or garbage.
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    (parts.next().is_none() && mac != [0; 6]).then_some(mac)
}

/// Every interface that is up with an IPv4 address: name, address, loopback.
fn up_ipv4() -> Vec<(String, Ipv4Addr, bool)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made, not yet freed.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        let lo = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if !up || ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its type.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in; ifa_name is a C string.
        let (sin, name) = unsafe {
            (
                &*ifa.ifa_addr.cast::<libc::sockaddr_in>(),
                CStr::from_ptr(ifa.ifa_name),
            )
        };
        let addr = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        out.push((name.to_string_lossy().into_owned(), addr, lo));
    }
    // SAFETY: the list getifaddrs made, freed once; no reference into it outlives this.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_loopback_has_none() {
        assert_eq!(
            parse_mac("02:42:ac:11:00:02"),
            Some([0x02, 0x42, 0xac, 0x11, 0, 2])
        );
        assert_eq!(parse_mac("00:00:00:00:00:00"), None);
        assert_eq!(parse_mac("02:42"), None);
        assert_eq!(parse_mac("02:42:ac:11:00:02:03"), None);
    }

    #[test]
    fn the_primary_interface_is_up_with_an_address() {
        let i = Iface::primary();
        assert!(!i.name.is_empty() && i.mtu >= 68, "{i:?}");
        assert!(!i.addr.is_unspecified(), "{i:?}");
    }
}
