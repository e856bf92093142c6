//! An upgrade keeps the running configuration: the daemon handing over sends its settings
//! with the listening socket, and the successor takes every one it was not given itself
//! (on its command line or in its config file); one it was given wins. Either way it says
//! what differs from what it would have run with, so an upgrade never changes a setting
//! silently.
//!
//! On the wire (after the STag index high-water mark in the `LISTENER` message) the
//! settings are postcard-encoded `(key, value)` pairs, each value as a config file writes
//! it; a successor of an earlier release ignores them, and a daemon of an earlier release
//! sends none (the successor then runs with its own settings and says so).

use std::fmt;

use crate::config::{Config, Control, KEYS};

/// Keys not carried over: the listening socket itself comes in the handover, and
/// `take_over` names the daemon before.
const NOT_CARRIED: &[&str] = &["listen", "take_over"];

/// What the daemon before said of its settings.
const ORIGIN: &str = "the daemon before";

/// The value of `key` in `cfg` as a config file writes it (`crc = false`, `buffer_size =
/// 1048576`, `control = off`); `None` for a setting that is not set (no capture, no
/// handover socket, no log filter).
pub(crate) fn value_of(cfg: &Config, key: &str) -> Option<String> {
    let secs = |d: Option<std::time::Duration>| Some(d.map_or(0, |d| d.as_secs()).to_string());
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    match key {
        "listen" => cfg.listen.map(|a| a.to_string()),
        "buffer_size" => Some(cfg.buffer_size.to_string()),
        "recv_depth" => Some(cfg.recv_depth.to_string()),
        "recv_size" => Some(cfg.recv_size.to_string()),
        "max_qps" => Some(cfg.max_qps.to_string()),
        "max_qps_per_address" => Some(cfg.max_qps_per_address.to_string()),
        "max_pending_handshakes" => Some(cfg.max_pending_handshakes.to_string()),
        "max_pending_per_address" => Some(cfg.max_pending_per_address.to_string()),
        "idle_timeout" => secs(cfg.idle_timeout),
        "stall_timeout" => secs(cfg.stall_timeout),
        "keepalive" => secs(cfg.keepalive),
        "busy_poll_us" => Some(cfg.busy_poll.as_micros().to_string()),
        "crc" => Some(cfg.crc.to_string()),
        "markers" => Some(cfg.markers.to_string()),
        "large_fpdus" => Some(cfg.large_fpdus.to_string()),
        "extensions" => Some(cfg.extensions.to_string()),
        "mpa_revision" => Some(cfg.mpa_revision.to_string()),
        "ird" => Some(cfg.ird.to_string()),
        "ord" => Some(cfg.ord.to_string()),
        "p2p" => Some(cfg.p2p.to_string()),
        "connect_timeout" => Some(cfg.connect_timeout.as_secs().to_string()),
        "log" => cfg.log.clone(),
        "pcap" => path(&cfg.pcap),
        "control" => Some(match &cfg.control {
            Control::Default => "default".to_owned(),
            Control::Off => "off".to_owned(),
            Control::Path(p) => p.display().to_string(),
        }),
        "handover" => path(&cfg.handover),
        "take_over" => path(&cfg.take_over),
        "metrics" => Some(
            cfg.metrics
                .map_or_else(|| "off".to_owned(), |a| a.to_string()),
        ),
        "local_threads" => Some(cfg.local_threads.to_string()),
        "max_local_clients" => Some(cfg.max_local_clients.to_string()),
        "max_local_clients_per_user" => Some(cfg.max_local_clients_per_user.to_string()),
        "max_local_qps" => Some(cfg.max_local_qps.to_string()),
        "max_local_mrs" => Some(cfg.max_local_mrs.to_string()),
        "max_local_mrs_total" => Some(cfg.max_local_mrs_total.to_string()),
        "max_registered" => Some(cfg.max_registered.to_string()),
        "max_queue_depth" => Some(cfg.max_queue_depth.to_string()),
        "staging_size" => Some(cfg.staging_size.to_string()),
        _ => None,
    }
}

/// The settings a daemon sends its successor.
pub(crate) fn encode(cfg: &Config) -> Vec<u8> {
    let pairs: Vec<(String, String)> = KEYS
        .iter()
        .filter(|(key, _)| !NOT_CARRIED.contains(key))
        .filter_map(|(key, _)| Some(((*key).to_owned(), value_of(cfg, key)?)))
        .collect();
    postcard::to_stdvec(&pairs).unwrap_or_default()
}

/// The settings a daemon before sent (`Err`: what cannot be read of them).
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    postcard::from_bytes(bytes).map_err(|e| format!("the settings cannot be read: {e}"))
}

/// One setting where the successor and the daemon before differ, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// Taken over: the successor runs with the daemon before's value.
    Taken {
        key: String,
        value: String,
        own: Option<String>,
    },
    /// Kept: the successor was given its own value, which wins.
    Kept {
        key: String,
        value: Option<String>,
        before: Option<String>,
        origin: String,
    },
    /// The daemon before ran with a setting this release cannot use.
    Unusable {
        key: String,
        value: String,
        why: String,
    },
}

impl Note {
    /// Whether it is worth a warning (the successor runs other than the daemon before).
    pub(crate) fn is_warning(&self) -> bool {
        !matches!(self, Self::Taken { .. })
    }
}

fn shown(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("(not set)")
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Taken { key, value, own } => write!(
                f,
                "{key} = {value}: taken over from the daemon before (this daemon's own \
                 setting would be {}; give {key} to override)",
                shown(own)
            ),
            Self::Kept {
                key,
                value,
                before,
                origin,
            } => write!(
                f,
                "{key} = {}: given by {origin}, where the daemon before ran with {}",
                shown(value),
                shown(before)
            ),
            Self::Unusable { key, value, why } => write!(
                f,
                "{key} = {value}: the daemon before ran with it, and this daemon cannot \
                 ({why}): it runs with its own setting"
            ),
        }
    }
}

/// The successor's settings: `mine` (given as `given` says, each key with its origin),
/// with every setting it was not given taken from `theirs` (what the daemon before sent);
/// and what differs.
pub(crate) fn take(
    mut mine: Config,
    given: &[(String, String)],
    theirs: &[(String, String)],
) -> (Config, Vec<Note>) {
    let mut notes = Vec::new();
    // The daemon before's configuration, as this release reads it.
    let mut before = Config::default();
    for (key, value) in theirs {
        if NOT_CARRIED.contains(&key.as_str()) {
            continue;
        }
        if let Err(e) = before.set(key, value, ORIGIN) {
            notes.push(Note::Unusable {
                key: key.clone(),
                value: value.clone(),
                why: e.message,
            });
        }
    }
    let sent = |key: &str| theirs.iter().any(|(k, _)| k == key);
    for (key, _) in KEYS.iter().filter(|(k, _)| !NOT_CARRIED.contains(k)) {
        // What the daemon before did not send (an older release's, or unset) is left be.
        let theirs = value_of(&before, key).filter(|_| sent(key));
        let own = value_of(&mine, key);
        if theirs.is_none() || theirs == own {
            continue;
        }
        if let Some((_, origin)) = given.iter().rev().find(|(k, _)| k == key) {
            notes.push(Note::Kept {
                key: (*key).to_owned(),
                value: own,
                before: theirs,
                origin: origin.clone(),
            });
            continue;
        }
        let value = theirs.unwrap_or_default();
        match mine.set(key, &value, ORIGIN) {
            Ok(()) => notes.push(Note::Taken {
                key: (*key).to_owned(),
                value,
                own,
            }),
            Err(e) => notes.push(Note::Unusable {
                key: (*key).to_owned(),
                value,
                why: e.message,
            }),
        }
    }
    (mine, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(flags: &[(&str, &str)]) -> Config {
        let mut c = Config::default();
        for (k, v) in flags {
            c.set(k, v, "test").unwrap();
        }
        c
    }

    #[test]
    fn every_key_round_trips_through_its_value() {
        let c = config(&[
            ("crc", "false"),
            ("buffer_size", "1M"),
            ("metrics", "127.0.0.1:9464"),
            ("control", "off"),
            ("idle_timeout", "0"),
            ("extensions", "send_imm"),
            ("pcap", "/tmp/x.pcapng"),
            ("handover", "/tmp/h.sock"),
            ("log", "debug"),
        ]);
        let pairs = decode(&encode(&c)).unwrap();
        assert!(!pairs.iter().any(|(k, _)| k == "listen" || k == "take_over"));
        let mut back = Config::default();
        for (k, v) in &pairs {
            back.set(k, v, "test").unwrap();
        }
        assert_eq!(back, c);
        for (key, _) in KEYS {
            assert!(
                value_of(&Config::default(), key).is_some()
                    || ["listen", "log", "pcap", "handover", "take_over"].contains(key),
                "{key} has a value"
            );
        }
    }

    #[test]
    fn what_was_not_given_is_taken_and_what_was_given_wins() {
        let before = config(&[
            ("crc", "false"),
            ("buffer_size", "1M"),
            ("metrics", "127.0.0.1:9464"),
            ("control", "off"),
            ("ord", "4"),
        ]);
        let mine = config(&[("ord", "8")]);
        let given = [("ord".to_owned(), "--ord".to_owned())];
        let (c, notes) = take(mine, &given, &decode(&encode(&before)).unwrap());
        assert!(!c.crc);
        assert_eq!(c.buffer_size, 1 << 20);
        assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(c.control, Control::Off);
        assert_eq!(c.ord, 8, "given, it wins");
        let lines: Vec<String> = notes.iter().map(ToString::to_string).collect();
        assert!(
            lines.contains(&"crc = false: taken over from the daemon before (this daemon's own setting would be true; give crc to override)".to_owned()),
            "{lines:?}"
        );
        assert!(
            lines.contains(
                &"ord = 8: given by --ord, where the daemon before ran with 4".to_owned()
            ),
            "{lines:?}"
        );
        assert_eq!(notes.iter().filter(|n| n.is_warning()).count(), 1);
        assert_eq!(notes.len(), 5, "{lines:?}");
    }

    #[test]
    fn a_daemon_of_another_release_leaves_the_rest_alone() {
        // An older one sent nothing; a newer one a key this release does not have.
        let (c, notes) = take(Config::default(), &[], &[]);
        assert_eq!((c, notes), (Config::default(), Vec::new()));
        let theirs = [
            ("colour".to_owned(), "blue".to_owned()),
            ("ird".to_owned(), "99999".to_owned()),
        ];
        let (c, notes) = take(Config::default(), &[], &theirs);
        assert_eq!(c, Config::default());
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes.iter().all(Note::is_warning));
        assert!(decode(b"\xff\xff").is_err());
    }
}
