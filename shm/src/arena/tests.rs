use std::io::Write as _;
use std::sync::Arc;

use super::*;
use crate::Region;

const PAGE: usize = 4096;

/// `pages` private anonymous pages of their own (no other test's heap objects share
/// them), unmapped on drop.
struct Anon {
    ptr: *mut u8,
    len: usize,
}

impl Anon {
    fn new(pages: usize) -> Self {
        let len = pages * PAGE;
        // SAFETY: a new private anonymous mapping where the kernel chooses.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Self {
            ptr: ptr.cast(),
            len,
        }
    }

    fn at(&self, offset: usize) -> *mut u8 {
        self.ptr.wrapping_add(offset)
    }

    fn get(&self, offset: usize) -> u8 {
        assert!(offset < self.len);
        // SAFETY: inside the mapping, which lives as long as `self`.
        unsafe { self.at(offset).read_volatile() }
    }

    fn set(&self, offset: usize, v: u8) {
        assert!(offset < self.len);
        // SAFETY: inside the mapping, which lives as long as `self`.
        unsafe { self.at(offset).write_volatile(v) }
    }

    fn fill(&self) {
        for i in 0..self.len {
            self.set(i, (i % 251) as u8);
        }
    }

    /// Puts octet `i` of the pattern back.
    fn restore(&self, i: usize) {
        self.set(i, (i % 251) as u8);
    }

    /// Shares `len` octets at `offset` of these pages.
    fn share(&self, offset: usize, len: usize) -> (Arc<File>, u64) {
        // SAFETY: the test's own pages, which no other thread touches.
        unsafe { share_in_place(self.at(offset), len) }.unwrap()
    }

    /// Undoes [`share`](Self::share).
    fn unshare(&self, offset: usize, len: usize) {
        // SAFETY: as above.
        unsafe { unshare(self.at(offset), len) }.unwrap()
    }

    fn intact(&self) -> bool {
        (0..self.len).all(|i| self.get(i) == (i % 251) as u8)
    }

    /// What /proc/self/maps says backs the page at `offset`.
    fn backing(&self, offset: usize) -> String {
        let a = self.at(offset) as usize;
        let m = mappings(a, a + 1).unwrap();
        m[0].path.clone()
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A `len`-octet owner of memory at `ptr` (as the C library's is).
struct Borrowed(*mut u8, usize);
// SAFETY: test memory, kept mapped for the region's life.
unsafe impl Send for Borrowed {}
// SAFETY: as above.
unsafe impl Sync for Borrowed {}
impl AsMut<[u8]> for Borrowed {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: the test keeps the memory mapped while the region lives.
        unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
    }
}

#[test]
fn a_buffer_moves_onto_the_arena_in_place_and_back() {
    let anon = Anon::new(3);
    anon.fill();
    let (ptr, len) = (anon.at(100), 2 * PAGE);
    let (file, offset) = anon.share(100, len);
    assert_eq!(offset, ptr as u64);
    assert!(anon.intact(), "the contents moved with the pages");
    assert!(anon.backing(0).contains(NAME), "{}", anon.backing(0));
    assert!(anon.backing(2 * PAGE).contains(NAME), "the last page too");

    // What a daemon maps: the same octets, both ways.
    let daemon = Region::map_at(file.try_clone().unwrap(), offset, len).unwrap();
    assert_eq!(daemon.view(0, 1).unwrap()[0], anon.get(100));
    daemon.write_at(5, b"Z").unwrap();
    assert_eq!(anon.get(105), b'Z');
    anon.set(200, b'Q');
    assert_eq!(daemon.view(100, 1).unwrap()[0], b'Q');
    // The program's region says where in the file it is.
    let mine = Region::adopt_in_file(Borrowed(ptr, len), file, offset);
    assert_eq!(mine.file_offset(), offset);
    assert!(mine.fd().is_some());

    // The "daemon" writes no more.
    anon.unshare(100, len);
    assert!(!anon.backing(0).contains(NAME), "private again");
    assert_eq!(
        (anon.get(105), anon.get(200)),
        (b'Z', b'Q'),
        "contents kept"
    );
    anon.restore(105);
    anon.restore(200);
    assert!(anon.intact());
    // The arena let the pages go: a daemon still mapping them sees a hole (zeros), and
    // the program's stores no longer reach it.
    anon.set(300, 9);
    let mut back = [1u8; 8];
    arena_read(ptr as u64 + 200, &mut back).unwrap();
    assert_eq!(back, [0; 8]);
    assert_eq!(daemon.view(200, 1).unwrap()[0], 0);
}

#[test]
fn overlapping_registrations_share_pages_until_the_last_goes() {
    let anon = Anon::new(3);
    anon.fill();
    let (file_a, a) = anon.share(0, 2 * PAGE);
    let (_, b) = anon.share(PAGE + 10, PAGE);
    let daemon_a = Region::map_at(file_a.try_clone().unwrap(), a, 2 * PAGE).unwrap();
    assert_eq!(b, a + PAGE as u64 + 10, "one arena, offsets are addresses");
    assert!(
        anon.intact(),
        "the second registration copied nothing over the first"
    );

    anon.unshare(0, 2 * PAGE);
    assert!(
        !anon.backing(0).contains(NAME),
        "page 0: no registration left"
    );
    assert!(
        anon.backing(PAGE).contains(NAME),
        "page 1: still registered"
    );
    daemon_a.write_at(PAGE + 20, b"K").unwrap();
    assert_eq!(anon.get(PAGE + 20), b'K', "the shared page is still one");
    anon.unshare(PAGE + 10, PAGE);
    assert!(!anon.backing(PAGE).contains(NAME));
    assert!(!anon.backing(2 * PAGE).contains(NAME));
    assert_eq!(anon.get(PAGE + 20), b'K');
}

#[test]
fn memory_that_is_not_the_programs_own_is_refused_untouched() {
    let mut tmp = tempfile();
    tmp.write_all(&[3u8; PAGE]).unwrap();
    // SAFETY: a new shared mapping of the test's file.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            tmp.as_raw_fd(),
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED);
    // SAFETY: the test's mapping.
    let err = unsafe { share_in_place(ptr.cast(), 10) }.unwrap_err();
    assert!(err.to_string().contains("only private memory"), "{err}");
    let m = mappings(ptr as usize, ptr as usize + 1).unwrap();
    assert!(!m[0].path.contains(NAME));
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(ptr, PAGE) };

    // Unmapped pages: EFAULT, as ibv_reg_mr gives for them.
    let anon = Anon::new(2);
    let hole = anon.at(PAGE);
    // SAFETY: the second page of the test's mapping, unmapped here.
    unsafe { libc::munmap(hole.cast(), PAGE) };
    // SAFETY: the test's own (half unmapped) range.
    let err = unsafe { share_in_place(anon.at(0), 2 * PAGE) }.unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT));
    assert!(!anon.backing(0).contains(NAME), "nothing moved");
    // Unsharing what was never shared does nothing.
    anon.unshare(0, PAGE);
}

/// A copy the kernel does in parts (it moves at most 2 GiB per call) goes on until all
/// is copied; one that stops is an error naming how far it got.
#[test]
fn copies_take_as_many_calls_as_the_kernel_needs() {
    let mut calls = Vec::new();
    copy_all("test", 1000, 10_000, |at, n| {
        calls.push((at, n));
        n.min(3000) as isize
    })
    .unwrap();
    assert_eq!(
        calls,
        [(1000, 10_000), (4000, 7000), (7000, 4000), (10_000, 1000)]
    );
    let mut left = 2;
    let err = copy_all("test", 0, 100, |_, n| {
        left -= 1;
        if left > 0 { (n / 2) as isize } else { 0 }
    })
    .unwrap_err();
    assert!(err.to_string().contains("stopped after 50 octets"), "{err}");
}

#[test]
fn uncovered_parts_of_a_range() {
    assert_eq!(uncovered(0, 10, &[]), vec![(0, 10)]);
    assert_eq!(uncovered(0, 10, &[(2, 4), (6, 12)]), vec![(0, 2), (4, 6)]);
    assert_eq!(uncovered(0, 10, &[(0, 10)]), vec![]);
    assert_eq!(uncovered(4, 8, &[(0, 2), (9, 12)]), vec![(4, 8)]);
}

fn tempfile() -> File {
    let path = std::env::temp_dir().join(format!("arena-test-{}", std::process::id()));
    let f = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}
