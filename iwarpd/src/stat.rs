//! `iwarpd stat`: asks a running daemon for its counters on the control socket, as a local
//! application would (Open, then Stats and ServiceStats), and prints them as a table or as
//! JSON: its local applications' and its built-in service's, as its metrics endpoint
//! shows them.

use std::path::Path;
use std::process::ExitCode;

use ipc::control::{DeviceCounters, OPCODES, Reply, Request, ServiceCounters, error};
use ipc::qpseg::Discard;

use crate::link::Link;

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

/// A running daemon's counters: its local applications' (the service on the control
/// socket), then its other services' (the built-in remote-memory target).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// The local service's.
    pub(crate) local: DeviceCounters,
    /// The other services', by name.
    pub(crate) services: Vec<ServiceCounters>,
}

/// Asks the daemon at `path` for its counters.
pub(crate) fn query(path: &Path) -> Result<Counters, String> {
    let mut link = Link::open(path)?;
    let local = match link.call(&Request::Stats)? {
        // The query itself is not an application.
        Reply::Stats(d) => DeviceCounters {
            clients: d.clients.saturating_sub(1),
            ..d
        },
        other => {
            return Err(link.failed(format!("it answered Stats with {other:?}")));
        }
    };
    let services = match link.ask(&Request::ServiceStats)? {
        Reply::ServiceStats(s) => s,
        // A daemon from before it has no such request: its local service alone.
        Reply::Error {
            code: error::MALFORMED,
            ..
        } => Vec::new(),
        Reply::Error { text, .. } => return Err(link.failed(text)),
        other => {
            return Err(link.failed(format!("it answered ServiceStats with {other:?}")));
        }
    };
    Ok(Counters { local, services })
}

/// `iwarpd stat [--json] [--qps]` against the daemon at `path`: prints, and says how it
/// went in the exit status (1: the daemon could not be asked).
pub(crate) fn run(path: &Path, json: bool, qps: bool) -> ExitCode {
    let text = if qps {
        crate::qps::query(path).map(|q| {
            if json {
                crate::qps::json(&q) + "\n"
            } else {
                crate::qps::table(&q, path)
            }
        })
    } else {
        query(path).map(|c| {
            if json {
                self::json(&c) + "\n"
            } else {
                table(&c, path)
            }
        })
    };
    match text {
        Ok(text) => {
            crate::out::print(&text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::out::eline(&format!("iwarpd stat: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// One service's counters as a JSON object (stable keys, for scripts).
fn service_json(d: &DeviceCounters) -> serde_json::Map<String, serde_json::Value> {
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
        .map(|r| (r.name().to_owned(), t.push.discards[r.index()].into()))
        .collect();
    let v = serde_json::json!({
        "queue_pairs": d.device_queue_pairs,
        "connections": d.connections,
        "connections_closed": d.connections_closed,
        "fpdus_sent": t.traffic.fpdus_sent,
        "fpdus_received": t.traffic.fpdus_received,
        "bytes_placed": t.traffic.bytes_placed,
        "octets_sent": per_op(&t.traffic.octets_sent),
        "octets_received": per_op(&t.traffic.octets_received),
        "terminates_sent": t.traffic.terminates_sent,
        "terminates_received": t.traffic.terminates_received,
        "push": {
            "executed": t.push.executed,
            "sq_executed": t.push.sq_path,
            "discards": discards,
        },
    });
    match v {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// The counters as one JSON object (stable keys, for scripts): the local service's at
/// the top, with `clients`, and each other service's under `services`.
pub(crate) fn json(c: &Counters) -> String {
    let mut top = service_json(&c.local);
    top.insert("clients".into(), c.local.clients.into());
    let services: serde_json::Map<String, serde_json::Value> = c
        .services
        .iter()
        .map(|s| (s.name.clone(), service_json(&s.counters).into()))
        .collect();
    top.insert("services".into(), services.into());
    serde_json::Value::Object(top).to_string()
}

/// One service's counters as lines of a table, under a heading.
fn service_table(s: &mut String, d: &DeviceCounters) {
    let t: &ipc::control::Counters = &d.totals;
    s.push_str(&format!(
        "  queue pairs now        {}\n",
        d.device_queue_pairs
    ));
    s.push_str(&format!(
        "  connections            {} opened, {} closed\n",
        d.connections, d.connections_closed
    ));
    s.push_str(&format!(
        "  FPDUs                  {} sent, {} received\n",
        t.traffic.fpdus_sent, t.traffic.fpdus_received
    ));
    s.push_str(&format!(
        "  Terminates             {} sent, {} received\n",
        t.traffic.terminates_sent, t.traffic.terminates_received
    ));
    s.push_str("  payload octets by opcode        sent        received\n");
    for (i, name) in OPCODE_NAMES.iter().enumerate() {
        if t.traffic.octets_sent[i] + t.traffic.octets_received[i] > 0 {
            s.push_str(&format!(
                "    {name:<20} {:>15} {:>15}\n",
                t.traffic.octets_sent[i], t.traffic.octets_received[i]
            ));
        }
    }
    let discarded: u64 = t.push.discards.iter().sum();
    s.push_str(&format!(
        "  push path              {} executed from pushed messages, {} from the send queue, \
         {discarded} discarded\n",
        t.push.executed, t.push.sq_path
    ));
    for r in Discard::ALL {
        let n = t.push.discards[r.index()];
        if n > 0 {
            s.push_str(&format!("    discarded: {:<16} {n}\n", r.name()));
        }
    }
}

/// The counters as a table for people: the local applications', then each other
/// service's.
pub(crate) fn table(c: &Counters, path: &Path) -> String {
    let mut s = format!("iwarpd at {}\n", path.display());
    s.push_str(&format!(
        "local applications (service local)\n  applications attached  {}\n",
        c.local.clients
    ));
    service_table(&mut s, &c.local);
    for svc in &c.services {
        let what = if svc.name == crate::remote_memory::BUILT_IN_SERVICE {
            "built-in remote-memory service"
        } else {
            "service"
        };
        s.push_str(&format!("{what} (service {})\n", svc.name));
        service_table(&mut s, &svc.counters);
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
        d.totals.traffic.octets_sent[3] = 8;
        d.totals.push.discards[Discard::FlowControl.index()] = 1;
        let c = Counters {
            local: d,
            services: vec![ServiceCounters {
                name: "remote_memory".into(),
                counters: DeviceCounters {
                    connections: 3,
                    ..DeviceCounters::default()
                },
            }],
        };
        let j: serde_json::Value = serde_json::from_str(&json(&c)).unwrap();
        assert_eq!(
            (j["clients"].as_u64(), j["connections"].as_u64()),
            (Some(2), Some(5))
        );
        assert_eq!(j["octets_sent"]["send"].as_u64(), Some(8));
        assert_eq!(j["octets_sent"]["write"].as_u64(), Some(0));
        assert_eq!(j["octets_sent"].as_object().map(|o| o.len()), Some(OPCODES));
        assert_eq!(j["push"]["discards"]["flow_control"].as_u64(), Some(1));
        assert_eq!(j["push"]["executed"].as_u64(), Some(0));
        let rm = &j["services"]["remote_memory"];
        assert_eq!(rm["connections"].as_u64(), Some(3));
        assert_eq!(
            rm["octets_sent"].as_object().map(|o| o.len()),
            Some(OPCODES)
        );
        let t = table(&c, Path::new("/x.sock"));
        assert!(
            t.contains("built-in remote-memory service (service remote_memory)"),
            "{t}"
        );
        assert!(t.contains("connections            3 opened"), "{t}");
    }
}
