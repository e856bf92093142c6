//! [`ConnectError`]: why setting up a connection failed, from TCP through the MPA
//! exchange. It lives here, beside [`MpaError`], so that the engine and the verbs API name
//! one type.

use bytes::Bytes;

use crate::{MpaConfig, MpaError, NoFrame, PeerParams};

/// Why a connection could not be set up. Its `Display` is a sentence for the user (the
/// cause and what to do), so a program shows it as it is:
///
/// ```
/// # fn connect() -> Result<(), mpa::ConnectError> { Ok(()) }
/// fn main() -> std::process::ExitCode {
///     if let Err(e) = connect() {
///         // `{e}`, not `{e:?}`: the Debug form is for developers.
///         eprintln!("myapp: connecting to the server: {e}");
///         return std::process::ExitCode::FAILURE;
///     }
///     std::process::ExitCode::SUCCESS
/// }
/// ```
///
/// (`fn main() -> Result<(), E>` prints `E`'s `Debug` form: avoid it for errors users read.)
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// TCP failed (refused, unreachable, no answer to the connect within the connect
    /// timeout, reset).
    Io(std::io::Error),
    /// The peer never sent its MPA frame: it stayed silent past the MPA timeout, closed
    /// or reset the TCP connection, or answered in another protocol ([`NoFrame`] says
    /// which, and what it sent).
    NoFrame(NoFrame),
    /// The MPA exchange failed: a malformed frame, or a negotiation this side cannot meet.
    Mpa(MpaError),
    /// The peer rejected the connection, with this private data.
    Rejected {
        /// The peer's private data.
        private_data: Bytes,
        /// What its answer dropped of what this side asked for: a hint at why.
        refused: Refused,
    },
    /// The request could not be built (for example private data over 512 octets).
    Invalid(String),
    /// The local `iwarpd` could not set the connection up for a client attached to it:
    /// its words (the MPA exchange failed, the peer closed, one of its limits).
    Daemon(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => match e.kind() {
                std::io::ErrorKind::ConnectionRefused => f.write_str(
                    "nothing is listening at that address and port (TCP connection refused): \
                     start the server first, or check the address and port",
                ),
                std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable => {
                    write!(
                        f,
                        "the host cannot be reached ({e}): check the address and the route"
                    )
                }
                std::io::ErrorKind::TimedOut => write!(
                    f,
                    "the host did not answer the TCP connect ({e}): is it up, and the port \
                     not filtered?"
                ),
                _ => write!(f, "TCP: {e}"),
            },
            Self::NoFrame(e) => e.fmt(f),
            Self::Mpa(e) => write!(f, "MPA negotiation failed: {e}"),
            Self::Rejected {
                private_data,
                refused,
            } => write!(
                f,
                "the peer rejected the connection ({} octets of private data){refused}",
                private_data.len()
            ),
            Self::Invalid(why) => write!(f, "invalid connection request: {why}"),
            Self::Daemon(why) => f.write_str(why),
        }
    }
}

/// What a peer that rejected the connection dropped in its answer of what this side's
/// Request asked for: a hint at why it refused. RFC 5044 §7.1.1 needs no C bit in an
/// answer (CRC is on when either frame has it), but Linux siw and this stack answer with
/// the Request's C bit, and siw drops it from the answer when it refuses CRC
/// (`mpa_crc_strict` with its CRC off). Displayed after the rejection, empty when nothing
/// was dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refused {
    /// This side asked for MPA CRC; the rejecting answer did not carry it.
    pub crc: bool,
}

impl Refused {
    /// What the rejecting `answer` turned off of what `asked` (this side's settings)
    /// asked for.
    pub fn between(asked: &MpaConfig, answer: &PeerParams) -> Self {
        Self {
            crc: asked.crc && !answer.crc,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.crc {
            f.write_str(
                "; its answer dropped the MPA CRC bit this side asked for, as Linux siw does \
                 when it refuses CRC (mpa_crc_strict): try connecting without CRC",
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::Mpa(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for ConnectError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_failures_in_the_users_words() {
        use std::io::{Error, ErrorKind};
        let io = |kind| ConnectError::Io(Error::from(kind)).to_string();
        assert!(io(ErrorKind::ConnectionRefused).starts_with("nothing is listening"));
        assert!(io(ErrorKind::ConnectionRefused).contains("refused"));
        assert!(io(ErrorKind::HostUnreachable).starts_with("the host cannot be reached"));
        assert!(io(ErrorKind::NetworkUnreachable).contains("route"));
        assert!(io(ErrorKind::TimedOut).contains("did not answer"));
        assert!(io(ErrorKind::ConnectionReset).starts_with("TCP: "));
    }

    #[test]
    fn a_rejection_names_what_the_answer_turned_off() {
        let rejected = |crc| {
            ConnectError::Rejected {
                private_data: Bytes::from_static(b"no"),
                refused: Refused { crc },
            }
            .to_string()
        };
        assert_eq!(
            rejected(false),
            "the peer rejected the connection (2 octets of private data)"
        );
        let crc = rejected(true);
        assert!(crc.contains("dropped the MPA CRC bit") && crc.ends_with("without CRC"));
    }
}
