//! Command-line helpers: octet counts with binary suffixes, and `--flag value` parsing
//! without a dependency.

use std::fmt;

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

/// Why the command line was not understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgError {}

/// Splits `--name value` and `--name=value` arguments into pairs; `--help`/`-h` gives
/// `("help", "")`. Anything else is an error naming the argument.
pub fn flags(args: impl IntoIterator<Item = String>) -> Result<Vec<(String, String)>, ArgError> {
    let mut out = Vec::new();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            out.push(("help".to_owned(), String::new()));
            continue;
        }
        let Some(name) = arg.strip_prefix("--") else {
            return Err(ArgError(format!(
                "unexpected argument {arg:?}; flags start with --"
            )));
        };
        match name.split_once('=') {
            Some((n, v)) => out.push((n.to_owned(), v.to_owned())),
            None => {
                let value = it
                    .next()
                    .ok_or_else(|| ArgError(format!("--{name} needs a value")))?;
                out.push((name.to_owned(), value));
            }
        }
    }
    Ok(out)
}

/// An IP address, or a host name resolved to its first address (`localhost` included):
/// what `flag` takes. The error names the flag and the text.
pub fn host(flag: &str, text: &str) -> Result<std::net::IpAddr, ArgError> {
    use std::net::ToSocketAddrs;
    if let Ok(ip) = text.parse() {
        return Ok(ip);
    }
    let mut addrs = (text, 0).to_socket_addrs().map_err(|e| {
        ArgError(format!(
            "{flag}: {text:?} is not an address or a known host name ({e})"
        ))
    })?;
    addrs
        .next()
        .map(|a| a.ip())
        .ok_or_else(|| ArgError(format!("{flag}: {text:?} has no address")))
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

    #[test]
    fn flag_forms() {
        let args = ["--size", "64K", "--total=1G", "-h"].map(String::from);
        let got = flags(args).unwrap();
        assert_eq!(
            got,
            vec![
                ("size".into(), "64K".into()),
                ("total".into(), "1G".into()),
                ("help".into(), String::new())
            ]
        );
        assert!(flags(["--size".to_owned()]).is_err());
        assert!(flags(["size".to_owned()]).is_err());
    }
}
