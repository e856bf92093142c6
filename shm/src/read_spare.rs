//! [`read_spare`]: one receive from a socket into a buffer's spare capacity, without
//! zeroing it first. Marking the octets the kernel wrote as the buffer's own is `unsafe`,
//! so it is done here.

use std::io;
use std::os::fd::AsFd;

use bytes::BytesMut;

/// One non-blocking `recv(2)` (`MSG_DONTWAIT`, whatever the descriptor's own mode: a
/// socket shared with another process may have had it changed) of socket `fd` into the
/// spare capacity of `buf`, after reserving room for at least `room` octets (at least 1),
/// appended to it (as tokio's `try_read_buf`). Returns the octets read (0: end of
/// stream). Errors are the system call's (`WouldBlock` when nothing is there).
pub fn read_spare(fd: impl AsFd, buf: &mut BytesMut, room: usize) -> io::Result<usize> {
    buf.reserve(room.max(1));
    let flags = rustix::net::RecvFlags::DONTWAIT;
    let ((filled, _), _) = rustix::net::recv(fd, buf.spare_capacity_mut(), flags)?;
    let n = filled.len();
    // SAFETY: `recv` initialized the first `n` octets of the spare capacity (`filled` is
    // them, at its start), and `n` is at most the spare capacity's length, so the new
    // length is within the capacity and every octet below it is initialized.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn appends_what_was_read_and_nothing_more() {
        // A blocking descriptor: the receive does not block all the same.
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut buf = BytesMut::from(&b"head:"[..]);
        assert_eq!(
            read_spare(&b, &mut buf, 64).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        a.write_all(b"twelve octet").unwrap();
        assert_eq!(read_spare(&b, &mut buf, 4).unwrap(), 12);
        assert_eq!(&buf[..], b"head:twelve octet");
        drop(a);
        while read_spare(&b, &mut buf, 64).unwrap() > 0 {}
        assert_eq!(&buf[..], b"head:twelve octet");
    }
}
