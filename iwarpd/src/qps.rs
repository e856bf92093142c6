//! `iwarpd stat --qps`: every queue pair of a running daemon, one line each, as
//! `rdma res show qp` lists a kernel RNIC's: its number, service (`local` for a local
//! application's, `remote_memory` for the built-in service's), state, the daemon's and
//! the peer's address, the owning application's pid and uid, and its counters.

use std::path::Path;

use ipc::control::{QpListing, Reply, Request};

use crate::link::Link;

/// Asks the daemon at `path` for every queue pair it holds, a page at a time.
pub(crate) fn query(path: &Path) -> Result<Vec<QpListing>, String> {
    let mut link = Link::open(path)?;
    let mut all: Vec<QpListing> = Vec::new();
    loop {
        let after = all.last().map_or(0, |q| q.num);
        let page = match link.ask(&Request::ListQps { after })? {
            Reply::QpList(page) => page,
            Reply::Error {
                code: ipc::control::error::MALFORMED,
                ..
            } => {
                return Err(format!(
                    "iwarpd at {} does not list its queue pairs: it is from before \
                     `iwarpd stat --qps` (upgrade it, or use `iwarpd stat` for its totals)",
                    path.display()
                ));
            }
            Reply::Error { text, .. } => {
                return Err(format!("iwarpd at {}: {text}", path.display()));
            }
            other => {
                return Err(format!(
                    "iwarpd at {} answered ListQps with {other:?}",
                    path.display()
                ));
            }
        };
        // A page that does not move on would be asked for forever.
        let moved = page.qps.first().is_some_and(|q| q.num > after);
        all.extend(page.qps);
        if !page.more || !moved {
            return Ok(all);
        }
    }
}

/// Payload octets sent and received, over every opcode.
fn octets(q: &QpListing) -> (u64, u64) {
    let c = &q.counters;
    (
        c.traffic.octets_sent.iter().sum(),
        c.traffic.octets_received.iter().sum(),
    )
}

/// An address, or `-` where the connection has none any more.
fn addr(a: std::net::SocketAddr) -> String {
    if a.port() == 0 && a.ip().is_unspecified() {
        "-".into()
    } else {
        a.to_string()
    }
}

/// A number, or `-` for none.
fn or_dash(n: Option<u32>) -> String {
    n.map_or_else(|| "-".into(), |n| n.to_string())
}

/// The queue pairs as a table for people, one line each.
pub(crate) fn table(qps: &[QpListing], path: &Path) -> String {
    let mut s = format!(
        "iwarpd at {}: {} queue pair{}\n",
        path.display(),
        qps.len(),
        if qps.len() == 1 { "" } else { "s" }
    );
    if qps.is_empty() {
        return s;
    }
    let rows: Vec<[String; 13]> = qps
        .iter()
        .map(|q| {
            let (tx, rx) = octets(q);
            let c = &q.counters;
            [
                q.num.to_string(),
                q.service.clone(),
                q.state.name().to_owned(),
                addr(q.local),
                addr(q.peer),
                or_dash(q.pid),
                or_dash(q.uid),
                c.traffic.fpdus_sent.to_string(),
                c.traffic.fpdus_received.to_string(),
                tx.to_string(),
                rx.to_string(),
                c.traffic.terminates_sent.to_string(),
                c.traffic.terminates_received.to_string(),
            ]
        })
        .collect();
    let head = [
        "QPN",
        "SERVICE",
        "STATE",
        "LOCAL",
        "PEER",
        "PID",
        "UID",
        "FPDUS-TX",
        "FPDUS-RX",
        "OCTETS-TX",
        "OCTETS-RX",
        "TERM-TX",
        "TERM-RX",
    ];
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<String> = cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        cells.join("  ").trim_end().to_owned() + "\n"
    };
    s += &line(&mut head.iter().copied());
    for r in &rows {
        s += &line(&mut r.iter().map(String::as_str));
    }
    s
}

/// The queue pairs as a JSON array of objects (stable keys, for scripts).
pub(crate) fn json(qps: &[QpListing]) -> String {
    let all: Vec<serde_json::Value> = qps
        .iter()
        .map(|q| {
            let (tx, rx) = octets(q);
            let c = &q.counters;
            serde_json::json!({
                "qpn": q.num,
                "service": q.service,
                "state": q.state.name(),
                "local": q.local.to_string(),
                "peer": q.peer.to_string(),
                "pid": q.pid,
                "uid": q.uid,
                "fpdus_sent": c.traffic.fpdus_sent,
                "fpdus_received": c.traffic.fpdus_received,
                "octets_sent": tx,
                "octets_received": rx,
                "bytes_placed": c.traffic.bytes_placed,
                "terminates_sent": c.traffic.terminates_sent,
                "terminates_received": c.traffic.terminates_received,
            })
        })
        .collect();
    serde_json::Value::Array(all).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc::control::{Counters, QpStateCode};

    fn qp(num: u32, service: &str, pid: Option<u32>) -> QpListing {
        QpListing {
            num,
            service: service.into(),
            state: QpStateCode(1),
            local: "127.0.0.1:4791".parse().unwrap(),
            peer: "127.0.0.1:50000".parse().unwrap(),
            pid,
            uid: pid.map(|_| 1000),
            counters: {
                let mut c = Counters::default();
                c.traffic.fpdus_sent = 7;
                c.traffic.octets_sent = [1; ipc::control::OPCODES];
                c
            },
        }
    }

    #[test]
    fn one_line_per_queue_pair_with_its_owner() {
        let qps = [qp(3, "local", Some(42)), qp(12, "remote_memory", None)];
        let t = table(&qps, Path::new("/x.sock"));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].ends_with("2 queue pairs"), "{t}");
        assert!(lines[1].starts_with("QPN  SERVICE"), "{t}");
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            &cells[..8],
            [
                "3",
                "local",
                "RTS",
                "127.0.0.1:4791",
                "127.0.0.1:50000",
                "42",
                "1000",
                "7"
            ],
            "{t}"
        );
        let cells: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            &cells[..7],
            [
                "12",
                "remote_memory",
                "RTS",
                "127.0.0.1:4791",
                "127.0.0.1:50000",
                "-",
                "-"
            ]
        );
        assert_eq!(
            cells[9],
            ipc::control::OPCODES.to_string(),
            "octets over every opcode"
        );
        let j: serde_json::Value = serde_json::from_str(&json(&qps)).unwrap();
        assert_eq!(j[0]["pid"].as_u64(), Some(42));
        assert!(j[1]["pid"].is_null());
        assert_eq!(j[1]["service"], "remote_memory");
        assert_eq!(j[0]["state"], "RTS");
    }
}
