//! `iwarpd stat`: asks a running daemon for its counters on the control socket, as a local
//! application would (Open, then Stats), and prints them as a table or as JSON.

use std::os::unix::net::UnixStream;
use std::path::Path;

use ipc::channel::{Inbox, send_all};
use ipc::control::{Counters, DeviceCounters, OPCODES, Reply, Request, func, reply_fds};
use ipc::qpseg::Discard;

/// The RDMAP opcodes' names, by value.
pub(crate) const OPCODE_NAMES: [&str; OPCODES] = [
    "write",
    "read_request",
    "read_response",
    "send",
    "send_invalidate",
    "send_se",
    "send_se_invalidate",
    "terminate",
    "immediate",
    "immediate_se",
    "atomic_request",
    "atomic_response",
    "send_imm",
    "send_invalidate_imm",
    "send_se_imm",
    "send_se_invalidate_imm",
];

/// Asks the daemon at `path` for its counters.
pub(crate) fn query(path: &Path) -> Result<DeviceCounters, String> {
    let sock = UnixStream::connect(path).map_err(|e| {
        format!(
            "cannot reach iwarpd at {}: {e}. Is it running with this control socket? \
             Pass the one it serves with --control PATH",
            path.display()
        )
    })?;
    call(
        &sock,
        path,
        &Request::Open {
            pid: std::process::id(),
        },
        1,
    )?;
    match call(&sock, path, &Request::Stats, 2)? {
        // The query itself is not an application.
        Reply::Stats(d) => Ok(DeviceCounters {
            clients: d.clients.saturating_sub(1),
            ..d
        }),
        other => Err(format!(
            "iwarpd at {} answered Stats with {other:?}",
            path.display()
        )),
    }
}

fn call(sock: &UnixStream, path: &Path, req: &Request, txn: u64) -> Result<Reply, String> {
    use std::os::fd::AsFd;
    let failed = |e: String| format!("iwarpd at {}: {e}", path.display());
    send_all(sock.as_fd(), &req.encode(txn), &[]).map_err(|e| failed(e.to_string()))?;
    let mut inbox = Inbox::new();
    loop {
        while let Some(msg) = inbox
            .next(|h, body| reply_fds(h.func, body))
            .map_err(|e| failed(format!("{e:?}")))?
        {
            let h = msg.header;
            if h.func & func::REPLY == 0 || h.txn != txn {
                continue;
            }
            return match Reply::decode(h.func & !func::REPLY, &msg.body) {
                Ok(Reply::Error { text, .. }) => Err(failed(text)),
                Ok(r) => Ok(r),
                Err(m) => Err(failed(format!(
                    "a reply this iwarpd cannot read ({m}): is it another version?"
                ))),
            };
        }
        inbox.recv(sock).map_err(|e| failed(format!("{e:?}")))?;
    }
}

/// The counters as one JSON object (stable keys, for scripts).
pub(crate) fn json(d: &DeviceCounters) -> String {
    let t = &d.totals;
    let per_op = |v: &[u64; OPCODES]| -> serde_json::Map<String, serde_json::Value> {
        OPCODE_NAMES
            .iter()
            .zip(v)
            .map(|(n, x)| ((*n).to_owned(), (*x).into()))
            .collect()
    };
    let discards: serde_json::Map<String, serde_json::Value> = Discard::ALL
        .iter()
        .map(|r| (r.name().to_owned(), t.push_discards[r.index()].into()))
        .collect();
    serde_json::json!({
        "clients": d.clients,
        "queue_pairs": d.device_queue_pairs,
        "connections": d.connections,
        "connections_closed": d.connections_closed,
        "fpdus_sent": t.fpdus_sent,
        "fpdus_received": t.fpdus_received,
        "bytes_placed": t.bytes_placed,
        "octets_sent": per_op(&t.octets_sent),
        "octets_received": per_op(&t.octets_received),
        "terminates_sent": t.terminates_sent,
        "terminates_received": t.terminates_received,
        "push": {
            "executed": t.pushed,
            "sq_executed": t.sq_executed,
            "discards": discards,
        },
    })
    .to_string()
}

/// The counters as a table for people.
pub(crate) fn table(d: &DeviceCounters, path: &Path) -> String {
    let t: &Counters = &d.totals;
    let mut s = format!("iwarpd at {}\n", path.display());
    s += &format!("  applications attached  {}\n", d.clients);
    s += &format!("  queue pairs now        {}\n", d.device_queue_pairs);
    s += &format!(
        "  connections            {} opened, {} closed\n",
        d.connections, d.connections_closed
    );
    s += &format!(
        "  FPDUs                  {} sent, {} received\n",
        t.fpdus_sent, t.fpdus_received
    );
    s += &format!(
        "  Terminates             {} sent, {} received\n",
        t.terminates_sent, t.terminates_received
    );
    s += "  payload octets by opcode        sent        received\n";
    for (i, name) in OPCODE_NAMES.iter().enumerate() {
        if t.octets_sent[i] + t.octets_received[i] > 0 {
            s += &format!(
                "    {name:<20} {:>15} {:>15}\n",
                t.octets_sent[i], t.octets_received[i]
            );
        }
    }
    let discarded: u64 = t.push_discards.iter().sum();
    s += &format!(
        "  push path              {} executed from pushed messages, {} from the send queue, \
         {discarded} discarded\n",
        t.pushed, t.sq_executed
    );
    for r in Discard::ALL {
        let n = t.push_discards[r.index()];
        if n > 0 {
            s += &format!("    discarded: {:<16} {n}\n", r.name());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_every_counter() {
        let mut d = DeviceCounters {
            clients: 2,
            connections: 5,
            ..DeviceCounters::default()
        };
        d.totals.octets_sent[3] = 8;
        d.totals.push_discards[Discard::FlowControl.index()] = 1;
        let j: serde_json::Value = serde_json::from_str(&json(&d)).unwrap();
        assert_eq!(
            (j["clients"].as_u64(), j["connections"].as_u64()),
            (Some(2), Some(5))
        );
        assert_eq!(j["octets_sent"]["send"].as_u64(), Some(8));
        assert_eq!(j["octets_sent"]["write"].as_u64(), Some(0));
        assert_eq!(j["octets_sent"].as_object().map(|o| o.len()), Some(OPCODES));
        assert_eq!(j["push"]["discards"]["flow_control"].as_u64(), Some(1));
        assert_eq!(j["push"]["executed"].as_u64(), Some(0));
    }
}
