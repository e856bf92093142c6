//! Command-line helpers the tools share with their `clap` parsers: octet counts with
//! binary suffixes, host names, and the `--extensions` list.

use std::fmt;

use verbs::Extensions;

/// Parses an octet count: a number with an optional binary suffix `K`, `M` or `G`
/// (case-insensitive, optionally followed by `iB` or `B`): `"65536"`, `"64K"`, `"256MiB"`,
/// `"1g"`. `None` if it is malformed or overflows.
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match body.char_indices().last() {
        Some((i, 'k')) => (body.get(..i)?, 10),
        Some((i, 'm')) => (body.get(..i)?, 20),
        Some((i, 'g')) => (body.get(..i)?, 30),
        _ => (body, 0),
    };
    let n: usize = digits.parse().ok()?;
    n.checked_mul(1usize.checked_shl(shift)?)
}

/// An octet count printed with a binary unit: `64 KiB`, `256 MiB`, `1.5 GiB`, `100 B`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Size(pub usize);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, usize); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (unit, scale) in UNITS {
            if self.0 >= scale {
                return if self.0.is_multiple_of(scale) {
                    write!(f, "{} {unit}", self.0 / scale)
                } else {
                    write!(f, "{:.1} {unit}", self.0 as f64 / scale as f64)
                };
            }
        }
        write!(f, "{} B", self.0)
    }
}

/// An IP address, or a host name resolved to its first address (`localhost` included):
/// what `flag` takes. The error names the flag and the text.
pub fn host(flag: &str, text: &str) -> Result<std::net::IpAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(ip) = text.parse() {
        return Ok(ip);
    }
    let mut addrs = (text, 0)
        .to_socket_addrs()
        .map_err(|e| format!("{flag}: {text:?} is not an address or a known host name ({e})"))?;
    addrs
        .next()
        .map(|a| a.ip())
        .ok_or_else(|| format!("{flag}: {text:?} has no address"))
}

/// Parses every tool's `--extensions LIST`: this stack's extensions to offer and accept,
/// comma-separated names among `send_imm`, `read_v2`, `all` and `none` (what
/// [`verbs::DeviceConfig::extensions`] takes). With `none` the traffic is standard
/// iWARP that Wireshark decodes; through an `iwarpd` the daemon's setting applies.
pub fn extensions(text: &str) -> Result<Extensions, String> {
    Extensions::parse_list(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_addresses_or_names() {
        assert_eq!(host("-a", "10.1.2.3").unwrap().to_string(), "10.1.2.3");
        assert!(
            host("-a", "localhost").unwrap().is_loopback(),
            "localhost resolves"
        );
    }

    #[test]
    fn extension_lists() {
        assert_eq!(extensions("none"), Ok(Extensions::NONE));
        assert_eq!(extensions("all"), Ok(Extensions::ALL));
        assert_eq!(extensions("read_v2"), Ok(Extensions::READ_V2));
        assert!(extensions("imm").unwrap_err().contains("send_imm"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("64kib"), Some(64 << 10));
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("256MB"), Some(256 << 20));
        assert_eq!(parse_size(" 1G "), Some(1 << 30));
        assert_eq!(parse_size("12B"), Some(12));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("1T"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }

    #[test]
    fn size_display() {
        assert_eq!(Size(64 << 10).to_string(), "64 KiB");
        assert_eq!(Size(256 << 20).to_string(), "256 MiB");
        assert_eq!(Size(3 << 29).to_string(), "1.5 GiB");
        assert_eq!(Size(100).to_string(), "100 B");
    }
}
