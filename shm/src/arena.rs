//! A C program's own memory, moved in place onto a memory file that a local daemon can
//! map: how the C library (`cverbs`) registers `malloc`ed memory through iwarpd.
//!
//! A hardware RNIC reaches a registered buffer by DMA; a daemon in another process can
//! reach only pages it can map. So [`share_in_place`] replaces the private pages under a
//! buffer with a shared mapping of one memory file of this process (the *arena*),
//! at the same address and with the same contents: the program's pointer stays valid and
//! its loads and stores reach the same octets the daemon maps. The arena is a sparse,
//! sealed memfd as large as the address space, and a page at address `a` is always its
//! octet `a`, so buffers that share a page (two small `malloc`s) share it there too, and
//! registrations may overlap freely. [`unshare`] turns the pages no registration covers
//! any more back into private anonymous memory (same contents) and releases them from the
//! arena, so a deregistered buffer is ordinary memory again (`fork`, `calloc`, `free`
//! behave as before).
//!
//! # What the program must respect
//!
//! - Nothing writes the buffer's pages while one of the two calls runs: both copy the
//!   pages and then replace the mapping, and a store in between is lost. "The buffer's
//!   pages" include other small objects on the same 4 KiB pages. rdma-core's own
//!   registration pins pages without a copy; this is the price of a software RNIC in
//!   another process.
//! - While shared, the pages are not inherited by a child process (`MADV_DONTFORK`, what
//!   `ibv_fork_init` does for hardware): a child that touches them faults, rather than
//!   sharing the parent's heap.
//! - Only the process's private memory moves: anonymous memory (heap, stack,
//!   `mmap(MAP_ANONYMOUS)`) and a file's private copy (`MAP_PRIVATE`: a program's global
//!   variables in its data segment). It comes back as private anonymous memory with the
//!   same contents. Shared memory (a file or another process's, mapped `MAP_SHARED`) and
//!   code are refused with the reason.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::sealed;

/// The arena's length: every user address of a 48-bit address space is an offset in it
/// (a sparse file: only the pages written take memory).
const ARENA_LEN: u64 = 1 << 48;

/// The name the arena carries in `/proc/PID/maps` (`/memfd:iwarp-arena (deleted)`).
const NAME: &str = "iwarp-arena";

struct Arena {
    /// The memory file, one per process: every region in it holds it (one descriptor,
    /// however many regions).
    file: Option<Arc<File>>,
    /// Page ranges shared by registrations alive now (one entry per registration).
    live: Vec<(usize, usize)>,
}

static ARENA: Mutex<Arena> = Mutex::new(Arena {
    file: None,
    live: Vec::new(),
});

fn page() -> usize {
    // SAFETY: sysconf reads a constant of the system; no memory is involved.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

/// The pages holding `ptr..ptr + len`.
fn pages(ptr: *const u8, len: usize) -> io::Result<(usize, usize)> {
    let p = page();
    let start = ptr as usize & !(p - 1);
    let end = (ptr as usize)
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(p))
        .filter(|&e| e as u64 <= ARENA_LEN && len > 0)
        .ok_or_else(|| {
            invalid(format!(
                "{len} octets at {ptr:p} lie outside the address space"
            ))
        })?;
    Ok((start, end))
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

/// Moves the pages holding `ptr..ptr + len` onto the arena, unless they are there
/// already, and returns the arena (shared, not a new descriptor) and the offset of `ptr` in it
/// (its address). A [`Region::adopt_in_file`](crate::Region::adopt_in_file) of the buffer
/// with them is memory a daemon can map. Each call is undone by one [`unshare`] of the
/// same range.
///
/// Fails, changing nothing, if a page of the range is not mapped (`EFAULT`), not
/// readable, or not private memory of this process (the error names the mapping).
///
/// # Safety
/// `ptr..ptr + len` is memory this process owns and keeps mapped while it is shared;
/// nothing else writes its pages during the call (see the [module docs](self)).
pub unsafe fn share_in_place(ptr: *mut u8, len: usize) -> io::Result<(Arc<File>, u64)> {
    let (start, end) = pages(ptr, len)?;
    let mut arena = ARENA.lock().unwrap_or_else(PoisonError::into_inner);
    if arena.file.is_none() {
        arena.file = Some(Arc::new(sealed::create(NAME, ARENA_LEN as usize)?));
    }
    let shared = Arc::clone(arena.file.as_ref().expect("created above"));
    let file = &*shared;
    let ino = file.metadata()?.ino();
    let mut moves = Vec::new();
    for m in mappings(start, end)? {
        if m.is_arena(ino) {
            continue;
        }
        if !m.private() {
            return Err(invalid(format!(
                "the memory at {:#x} is a shared mapping or code of {} ({}), not the \
                 program's private memory: through iwarpd only private memory (malloc, \
                 the stack, global variables, mmap MAP_PRIVATE) can be registered; copy \
                 it into such a buffer, or unset IWARP_DEVICE to run the engine in this \
                 process",
                m.start, m.path, m.perms
            )));
        }
        if !m.perms.starts_with('r') {
            return Err(invalid(format!(
                "the memory at {:#x} is not readable ({})",
                m.start, m.perms
            )));
        }
        moves.push(m);
    }
    for (i, m) in moves.iter().enumerate() {
        // SAFETY: `m` is a private mapping of this process inside the caller's range
        // (just read from /proc/self/maps, under the arena's lock), which the caller lets
        // us replace with a mapping of the same contents.
        if let Err(e) = unsafe { move_onto(file, m) } {
            // Out of mappings (vm.max_map_count), say: the pieces moved go back, and the
            // arena lets go of what was copied.
            for m in &moves[..i] {
                // SAFETY: moved onto the arena just now, covered by no registration.
                if unsafe { move_off(file, m) }.is_ok() {
                    let _ = release(file, m.start, m.end);
                }
            }
            let _ = release(file, m.start, m.end);
            return Err(e);
        }
    }
    arena.live.push((start, end));
    Ok((shared, ptr as u64))
}

/// Undoes one [`share_in_place`] of `ptr..ptr + len`: the pages of the range that no
/// other shared range covers become private anonymous memory again, with the same
/// contents, and the arena lets their pages go. Pages the program unmapped meanwhile are
/// only released. Does nothing for a range that is not shared.
///
/// # Safety
/// As [`share_in_place`]: nothing writes the pages during the call; and the daemon no
/// longer writes them (the region is deregistered).
pub unsafe fn unshare(ptr: *mut u8, len: usize) -> io::Result<()> {
    let (start, end) = pages(ptr, len)?;
    let mut arena = ARENA.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(at) = arena.live.iter().position(|&r| r == (start, end)) else {
        return Ok(());
    };
    arena.live.swap_remove(at);
    let Some(file) = arena.file.clone() else {
        return Ok(());
    };
    let file = &*file;
    let ino = file.metadata()?.ino();
    // Every piece is tried; one that cannot move back stays shared (its pages are not
    // released: they are the program's memory), and the first error is returned.
    let mut first_error = None;
    for (a, b) in uncovered(start, end, &arena.live) {
        let maps = match mappings_or_gaps(a, b) {
            Ok(m) => m,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        let mut stuck = Vec::new();
        for m in maps.iter().filter(|m| m.is_arena(ino)) {
            // SAFETY: `m` is this process's shared mapping of the arena at its own
            // address (read under the lock), which no registration covers any more.
            if let Err(e) = unsafe { move_off(file, m) } {
                first_error.get_or_insert(e);
                stuck.push((m.start, m.end));
            }
        }
        // The rest (moved back, or unmapped or remapped by the program meanwhile): the
        // arena's copy of those pages is nobody's.
        for (x, y) in uncovered(a, b, &stuck) {
            let _ = release(file, x, y);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The parts of `start..end` that none of `live` covers.
fn uncovered(start: usize, end: usize, live: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut parts = vec![(start, end)];
    for &(ls, le) in live {
        parts = parts
            .into_iter()
            .flat_map(|(a, b)| {
                if le <= a || b <= ls {
                    return vec![(a, b)];
                }
                [(a, ls.max(a)), (le.min(b), b)]
                    .into_iter()
                    .filter(|(x, y)| x < y)
                    .collect()
            })
            .collect();
    }
    parts
}

/// One line of `/proc/self/maps`, cut to a range.
#[derive(Debug)]
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
    /// File offset of `start`.
    offset: u64,
    inode: u64,
    path: String,
}

impl Mapping {
    fn is_arena(&self, ino: u64) -> bool {
        self.inode == ino && self.path.contains(NAME) && self.offset == self.start as u64
    }

    /// Memory of this process alone (anonymous, or a file's private copy), not code.
    fn private(&self) -> bool {
        self.perms.ends_with('p') && self.perms.as_bytes().get(2) != Some(&b'x')
    }

    fn prot(&self) -> libc::c_int {
        let b = self.perms.as_bytes();
        let mut prot = libc::PROT_NONE;
        for (i, flag) in [libc::PROT_READ, libc::PROT_WRITE, libc::PROT_EXEC]
            .into_iter()
            .enumerate()
        {
            if b.get(i).is_some_and(|&c| c != b'-') {
                prot |= flag;
            }
        }
        prot
    }
}

/// The mappings over `start..end`, cut to it; an error if a page of it is not mapped.
fn mappings(start: usize, end: usize) -> io::Result<Vec<Mapping>> {
    let maps = mappings_or_gaps(start, end)?;
    let mut at = start;
    for m in &maps {
        if m.start != at {
            break;
        }
        at = m.end;
    }
    if at < end {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(maps)
}

/// The mappings over `start..end`, cut to it, gaps left out.
fn mappings_or_gaps(start: usize, end: usize) -> io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string("/proc/self/maps")?;
    Ok(text
        .lines()
        .filter_map(parse)
        .filter(|m| m.start < end && start < m.end)
        .map(|mut m| {
            if m.start < start {
                m.offset += (start - m.start) as u64;
                m.start = start;
            }
            m.end = m.end.min(end);
            m
        })
        .collect())
}

/// A `/proc/self/maps` line: `start-end perms offset dev inode [path]`.
fn parse(line: &str) -> Option<Mapping> {
    let mut f = line.splitn(6, ' ');
    let (s, e) = f.next()?.split_once('-')?;
    let perms = f.next()?.to_owned();
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let _dev = f.next()?;
    let inode = f.next()?.parse().ok()?;
    Some(Mapping {
        start: usize::from_str_radix(s, 16).ok()?,
        end: usize::from_str_radix(e, 16).ok()?,
        perms,
        offset,
        inode,
        path: f.next().unwrap_or("").trim().to_owned(),
    })
}

/// Copies `m`'s pages into the arena at their address and maps the arena there instead.
///
/// # Safety
/// `m` is a readable private mapping of this process that may be replaced.
unsafe fn move_onto(file: &File, m: &Mapping) -> io::Result<()> {
    let len = m.end - m.start;
    copy_all(
        "copying the buffer into the arena",
        m.start,
        len,
        |at, n| {
            // SAFETY: the kernel reads `n` octets at `at`, inside `m`, a readable mapping of
            // this process (it fails with EFAULT, never faults, if the program unmapped it).
            unsafe {
                libc::pwrite(
                    file.as_raw_fd(),
                    at as *const libc::c_void,
                    n,
                    at as libc::off_t,
                )
            }
        },
    )?;
    // SAFETY: replaces `m`'s pages (the caller's to replace) with a shared mapping of the
    // arena's octets at the same address, which now hold the same contents.
    let at = unsafe {
        libc::mmap(
            m.start as *mut libc::c_void,
            len,
            m.prot(),
            libc::MAP_SHARED | libc::MAP_FIXED,
            file.as_raw_fd(),
            m.start as libc::off_t,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: advice on the mapping just made; it changes no octet.
    unsafe { libc::madvise(at, len, libc::MADV_DONTFORK) };
    Ok(())
}

/// Gives `m` (the arena, mapped at its own address) private anonymous pages again with
/// the same contents.
///
/// # Safety
/// `m` is a mapping of the arena that no registration covers.
unsafe fn move_off(file: &File, m: &Mapping) -> io::Result<()> {
    let len = m.end - m.start;
    // SAFETY: a new private anonymous mapping where the kernel chooses; nothing else
    // refers to it.
    let tmp = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if tmp == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let base = tmp as usize;
    let copied = copy_all(
        "copying the buffer out of the arena",
        m.start,
        len,
        |at, n| {
            // SAFETY: the kernel writes `n` octets into `tmp` at the same distance from its
            // start as `at` from `m.start`: inside the mapping just made.
            unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    (base + (at - m.start)) as *mut libc::c_void,
                    n,
                    at as libc::off_t,
                )
            }
        },
    );
    if let Err(e) = copied {
        // SAFETY: `tmp` is the mapping made above, referred to by nothing else.
        unsafe { libc::munmap(tmp, len) };
        return Err(e);
    }
    // SAFETY: `tmp` is ours; the protection becomes the original mapping's.
    unsafe { libc::mprotect(tmp, len, m.prot()) };
    // SAFETY: moves `tmp` over `m`'s address (replacing the arena's mapping there, which
    // the caller lets go), atomically; `tmp` is not referred to after.
    let at = unsafe {
        libc::mremap(
            tmp,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            m.start as *mut libc::c_void,
        )
    };
    if at == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        // SAFETY: `tmp` was not moved; it is still ours alone.
        unsafe { libc::munmap(tmp, len) };
        return Err(e);
    }
    Ok(())
}

/// Lets the arena's pages `a..b` go (a hole again).
fn release(file: &File, a: usize, b: usize) -> io::Result<()> {
    rustix::fs::fallocate(
        file,
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        a as u64,
        (b - a) as u64,
    )?;
    Ok(())
}

/// Copies `len` octets from address (and file offset) `start` with `op(at, n)` (a
/// `pread` or `pwrite` of `n` octets at `at`), as many calls as the kernel needs (it
/// moves at most 2 GiB per call), retrying an interrupted one.
fn copy_all(
    what: &str,
    start: usize,
    len: usize,
    mut op: impl FnMut(usize, usize) -> isize,
) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let n = op(start + done, len - done);
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(io::Error::other(format!(
                    "{what}: stopped after {done} octets"
                )));
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
                }
            }
        }
    }
    Ok(())
}

/// The arena's octets at `offset` (what a daemon's mapping of it shows), for tests.
#[cfg(test)]
pub(crate) fn arena_read(offset: u64, dst: &mut [u8]) -> io::Result<()> {
    let arena = ARENA.lock().unwrap_or_else(PoisonError::into_inner);
    match &arena.file {
        Some(f) => std::os::unix::fs::FileExt::read_exact_at(&**f, dst, offset),
        None => Err(io::Error::other("no arena")),
    }
}

#[cfg(test)]
mod tests;
