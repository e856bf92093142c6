//! Memory files shared between two processes: created sealed against resizing, and
//! checked for those seals before a file another process sent is mapped.
//!
//! A process that maps a memfd it did not create is exposed to the creator: if the file
//! were truncated after the mapping, touching the lost pages would raise `SIGBUS` in the
//! mapping process. So every memfd this crate creates is sealed with `F_SEAL_SHRINK` and
//! `F_SEAL_GROW` (and `F_SEAL_SEAL`, so the seals stay) once sized, and [`check`] refuses a
//! received file without those seals or shorter than the length asked for. A client of a
//! local daemon can then only change the octets, never pull the pages away.

use std::fs::File;
use std::io;

use rustix::fs::SealFlags;

/// The seals every shared memory file carries.
const SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// A new memfd of `len` octets named `name` (seen in `/proc/PID/maps`), sealed against
/// resizing.
pub(crate) fn create(name: &str, len: usize) -> io::Result<File> {
    let memfd = memfd::MemfdOptions::default()
        .close_on_exec(true)
        .allow_sealing(true)
        .create(name)
        .map_err(|e| match e {
            memfd::Error::Create(e) | memfd::Error::AddSeals(e) | memfd::Error::GetSeals(e) => e,
        })?;
    let file = memfd.into_file();
    file.set_len(len as u64)?;
    rustix::fs::fcntl_add_seals(&file, SEALS)?;
    Ok(file)
}

/// Checks that `file`, received from another process, is a memory file sealed against
/// resizing and at least `len` octets long: the conditions for mapping it safely.
pub(crate) fn check(file: &File, len: usize) -> io::Result<()> {
    let seals = rustix::fs::fcntl_get_seals(file).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a sealable memory file ({e})"),
        )
    })?;
    if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "memory file not sealed against resizing (F_SEAL_SHRINK and F_SEAL_GROW)",
        ));
    }
    let size = file.metadata()?.len();
    if size < len as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("memory file of {size} octets, {len} expected"),
        ));
    }
    Ok(())
}
