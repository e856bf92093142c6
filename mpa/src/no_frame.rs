//! [`NoFrame`]: a peer that never sent its MPA frame (the Reply an Initiator waits for,
//! the Request a Responder waits for), and how that ended: it stayed silent past the
//! timeout, closed or reset the TCP connection, or answered with octets that are not MPA.
//! The driver of a [`Handshake`](crate::Handshake) knows which, and what arrived; this
//! says it in the user's words.

use std::time::Duration;

use bytes::Bytes;

use crate::Role;

/// How many of the peer's octets a [`NoFrame`] keeps to show.
pub(crate) const SHOWN: usize = 64;

/// How the exchange ended without the peer's MPA frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEnd {
    /// No complete frame arrived within this time (the MPA timeout).
    Silent(Duration),
    /// The peer closed the TCP connection (a FIN).
    Closed,
    /// The peer reset the TCP connection (an RST).
    Reset,
    /// The peer sent octets that do not start with an MPA key: another protocol.
    NotMpa,
}

/// The peer did not send its MPA frame: [`PeerEnd`] says how it ended, [`Self::sent`]
/// what it sent instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoFrame {
    /// This side's role: an Initiator waited for a Reply, a Responder for a Request.
    pub role: Role,
    /// How it ended.
    pub end: PeerEnd,
    /// The first octets the peer sent (at most 64); empty if it sent nothing.
    pub sent: Bytes,
    /// How many octets the peer sent in all.
    pub sent_len: usize,
}

impl NoFrame {
    /// The peer ended as `end` after sending `received` (all of it; the first [`SHOWN`]
    /// octets are kept).
    pub fn new(role: Role, end: PeerEnd, received: &[u8]) -> Self {
        let shown = received.get(..SHOWN).unwrap_or(received);
        Self {
            role,
            end,
            sent: Bytes::copy_from_slice(shown),
            sent_len: received.len(),
        }
    }

    /// The frame that never came, as the user knows it.
    fn awaited(&self) -> &'static str {
        match self.role {
            Role::Initiator => "MPA Reply",
            Role::Responder => "MPA Request",
        }
    }

    /// Who the peer is, as this side sees it.
    fn peer(&self) -> &'static str {
        match self.role {
            Role::Initiator => "the peer",
            Role::Responder => "the client",
        }
    }

    /// What it sent, quoted: `12 octets ("HTTP/1.1 400")`.
    fn quoted(&self) -> String {
        let text = quote(&self.sent);
        let more = if self.sent_len > self.sent.len() {
            "..."
        } else {
            ""
        };
        format!(
            "{} octet{} (\"{text}{more}\")",
            self.sent_len,
            if self.sent_len == 1 { "" } else { "s" }
        )
    }

    /// Whether what it sent could be the start of an MPA frame cut short.
    fn is_mpa_start(&self) -> bool {
        const KEYS: [&[u8]; 2] = [b"MPA ID Req Frame", b"MPA ID Rep Frame"];
        KEYS.iter().any(|key| {
            let n = self.sent.len().min(key.len());
            self.sent.get(..n) == key.get(..n)
        })
    }
}

impl std::fmt::Display for NoFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (frame, peer) = (self.awaited(), self.peer());
        let hint = match self.role {
            Role::Initiator => "is an iWARP listener on that address and port?",
            Role::Responder => "is it an iWARP client?",
        };
        match self.end {
            PeerEnd::Silent(waited) if self.sent.is_empty() => {
                let accepted = match self.role {
                    Role::Initiator => "the peer accepted the TCP connection and sent nothing",
                    Role::Responder => "the client connected and sent nothing",
                };
                write!(f, "no {frame} within {}: {accepted}; {hint}", Secs(waited))
            }
            PeerEnd::Silent(waited) => write!(
                f,
                "no complete {frame} within {}: {peer} sent {} and then nothing; {hint}",
                Secs(waited),
                self.quoted()
            ),
            PeerEnd::Closed | PeerEnd::Reset => {
                let how = if self.end == PeerEnd::Closed {
                    "closed"
                } else {
                    "reset"
                };
                write!(f, "{peer} {how} the TCP connection before its {frame}")?;
                if self.sent.is_empty() {
                    match self.role {
                        Role::Initiator => f.write_str(
                            ", having sent nothing: it is not an iWARP listener, or one that \
                             turned the connection away unanswered (too many handshakes in \
                             progress, or its application not accepting)",
                        ),
                        Role::Responder => f.write_str(", having sent nothing"),
                    }
                } else if self.is_mpa_start() {
                    write!(f, " (it sent only {}, the start of one)", self.quoted())
                } else {
                    write!(f, " (it sent {} that are not MPA); {hint}", self.quoted())
                }
            }
            PeerEnd::NotMpa => write!(
                f,
                "{peer} answered but is not an iWARP MPA endpoint (it sent {}): check the \
                 address and port",
                self.quoted()
            ),
        }
    }
}

/// A duration as a person says it: `10 s`, `1.5 s`, `200 ms`.
struct Secs(Duration);

impl std::fmt::Display for Secs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        if d < Duration::from_secs(1) {
            write!(f, "{} ms", d.as_millis())
        } else if d.subsec_millis() == 0 {
            write!(f, "{} s", d.as_secs())
        } else {
            write!(f, "{:.1} s", d.as_secs_f64())
        }
    }
}

/// `data` as text: printable ASCII as it is, CR and LF as `\r` and `\n`, anything else
/// as `.` (a banner or an HTTP status line reads as itself).
fn quote(data: &[u8]) -> String {
    data.iter()
        .map(|&b| match b {
            b'\r' => "\\r".to_owned(),
            b'\n' => "\\n".to_owned(),
            b'"' => "\\\"".to_owned(),
            0x20..=0x7e => char::from(b).to_string(),
            _ => ".".to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(role: Role, end: PeerEnd, sent: &[u8]) -> String {
        NoFrame::new(role, end, sent).to_string()
    }

    #[test]
    fn a_silent_peer_is_named_with_the_time_waited() {
        let silent = text(
            Role::Initiator,
            PeerEnd::Silent(Duration::from_secs(10)),
            b"",
        );
        assert_eq!(
            silent,
            "no MPA Reply within 10 s: the peer accepted the TCP connection and sent \
             nothing; is an iWARP listener on that address and port?"
        );
        let partial = text(
            Role::Initiator,
            PeerEnd::Silent(Duration::from_millis(1500)),
            b"MPA",
        );
        assert!(
            partial.starts_with(
                "no complete MPA Reply within 1.5 s: the peer sent 3 octets (\"MPA\")"
            ),
            "{partial}"
        );
        let client = text(
            Role::Responder,
            PeerEnd::Silent(Duration::from_millis(200)),
            b"",
        );
        assert!(
            client
                .starts_with("no MPA Request within 200 ms: the client connected and sent nothing"),
            "{client}"
        );
    }

    #[test]
    fn a_closed_connection_says_what_the_peer_sent() {
        let http = b"HTTP/1.1 400 Bad Request\r\n\r\n";
        let closed = text(Role::Initiator, PeerEnd::Closed, http);
        assert_eq!(
            closed,
            "the peer closed the TCP connection before its MPA Reply (it sent 28 octets \
             (\"HTTP/1.1 400 Bad Request\\r\\n\\r\\n\") that are not MPA); is an iWARP \
             listener on that address and port?"
        );
        let nothing = text(Role::Initiator, PeerEnd::Reset, b"");
        assert!(
            nothing.starts_with(
                "the peer reset the TCP connection before its MPA Reply, having sent nothing"
            ),
            "{nothing}"
        );
        let cut = text(Role::Initiator, PeerEnd::Closed, b"MPA ID Rep");
        assert!(
            cut.ends_with("(it sent only 10 octets (\"MPA ID Rep\"), the start of one)"),
            "{cut}"
        );
    }

    #[test]
    fn another_protocol_is_named_with_what_it_sent() {
        let long = [b'x'; 100];
        let s = text(Role::Initiator, PeerEnd::NotMpa, &long);
        assert!(
            s.contains("it sent 100 octets (\"xxxx") && s.contains("x...\")"),
            "{s}"
        );
        assert_eq!(
            NoFrame::new(Role::Initiator, PeerEnd::NotMpa, &long)
                .sent
                .len(),
            SHOWN
        );
    }
}
