//! The same behaviour from both file systems: every expectation the engine
//! has of the trait holds for the real Linux implementation and the simulated
//! disk alike.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::many_single_char_names,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::io::ErrorKind;
use std::path::Path;

use quorumlog_io::{BackendInUse, FileSystem, IoBackend, OpenMode, RealFs, SimFs};

fn check(fs: &dyn FileSystem, root: &Path) {
    let dir = root.join("d");
    fs.create_dir_all(&dir.join("sub")).unwrap();
    fs.sync_dir(root).unwrap();

    // Open modes.
    let a = dir.join("a");
    assert_eq!(
        fs.open(&a, OpenMode::Read).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let f = fs.open(&a, OpenMode::CreateNew).unwrap();
    assert_eq!(
        fs.open(&a, OpenMode::CreateNew).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    let err = fs
        .open(&dir.join("missing/x"), OpenMode::CreateNew)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        err.to_string().contains("missing"),
        "error names the path: {err}"
    );

    positional_io_and_length(fs, &*f, &a);
    renames_removes_and_listing(fs, &dir, &a);
    locks(fs, &dir);
}

/// A lock is exclusive, and its holder is found without taking it: this
/// process while held, nobody once released or for a missing file.
fn locks(fs: &dyn FileSystem, dir: &Path) {
    let path = dir.join("lock");
    assert_eq!(fs.lock_holder(&path).unwrap(), None);
    let held = fs.lock(&path).unwrap();
    assert_eq!(fs.lock_holder(&path).unwrap(), Some(std::process::id()));
    assert_eq!(fs.lock(&path).unwrap_err().kind(), ErrorKind::WouldBlock);
    // Looking did not take it: still held, still refused.
    assert_eq!(fs.lock_holder(&path).unwrap(), Some(std::process::id()));
    drop(held);
    assert_eq!(fs.lock_holder(&path).unwrap(), None);
    drop(fs.lock(&path).unwrap());
}

fn positional_io_and_length(fs: &dyn FileSystem, f: &dyn quorumlog_io::File, a: &Path) {
    // Positional writes, holes, reads.
    f.write_all_at(b"hello", 0).unwrap();
    f.write_all_at(b"world", 10).unwrap();
    assert_eq!(f.len().unwrap(), 15);
    let all = f.read_to_end().unwrap();
    assert_eq!(&all[..5], b"hello");
    assert_eq!(&all[5..10], &[0; 5]);
    let mut buf = [0u8; 8];
    assert_eq!(f.read_at(&mut buf, 12).unwrap(), 3);
    assert_eq!(f.read_at(&mut buf, 100).unwrap(), 0);
    assert_eq!(
        f.read_exact_at(&mut buf, 12).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    f.sync_data().unwrap();
    f.sync_all().unwrap();

    // Length changes.
    f.allocate(4096).unwrap();
    assert_eq!(f.len().unwrap(), 4096);
    f.allocate(100).unwrap();
    assert_eq!(f.len().unwrap(), 4096, "allocate never shrinks");
    f.set_len(5).unwrap();
    assert_eq!(f.read_to_end().unwrap(), b"hello");

    started_writes(fs, f, a);

    // Truncating open.
    let t = fs.open(a, OpenMode::CreateOrTruncate).unwrap();
    assert_eq!(t.len().unwrap(), 0);

    // Read-only handles refuse writes.
    let r = fs.open(a, OpenMode::Read).unwrap();
    assert!(r.write_all_at(b"x", 0).is_err());
}

/// A write started now and finished later (a sync round's next write,
/// submitted before anyone is woken): it lands exactly the window asked
/// for, gives its buffer back, lands even when the ticket is dropped
/// unfinished, and reports a failure at the finish.
fn started_writes(fs: &dyn FileSystem, f: &dyn quorumlog_io::File, a: &Path) {
    let mut buf = vec![b'.'; 16];
    buf[4..9].copy_from_slice(b"later");
    let ticket = f.start_write_at(buf, 4..9, 20);
    let (back, r) = f.finish_write(ticket);
    r.unwrap();
    assert_eq!(back.len(), 16, "the whole buffer comes back");
    let mut got = [0u8; 5];
    f.read_exact_at(&mut got, 20).unwrap();
    assert_eq!(&got, b"later");
    assert_eq!(f.len().unwrap(), 25, "only the window was written");

    drop(f.start_write_at(b"dropped".to_vec(), 0..7, 30));
    let mut got = [0u8; 7];
    f.read_exact_at(&mut got, 30).unwrap();
    assert_eq!(&got, b"dropped", "a dropped ticket's write still lands");

    let r = fs.open(a, OpenMode::Read).unwrap();
    let (_, result) = r.finish_write(r.start_write_at(b"x".to_vec(), 0..1, 0));
    assert!(result.is_err(), "a read-only handle's started write fails");
    f.set_len(5).unwrap();
}

fn renames_removes_and_listing(fs: &dyn FileSystem, dir: &Path, a: &Path) {
    let (dir, a) = (dir.to_path_buf(), a.to_path_buf());
    // Rename replaces, remove removes, list is sorted and shows directories.
    let b = dir.join("b");
    let g = fs.open(&b, OpenMode::CreateNew).unwrap();
    g.write_all_at(b"bee", 0).unwrap();
    fs.rename(&b, &a).unwrap();
    assert!(!fs.exists(&b).unwrap());
    let names: Vec<(String, bool)> = fs
        .list(&dir)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.is_dir))
        .collect();
    assert_eq!(names, vec![("a".into(), false), ("sub".into(), true)]);
    assert_eq!(
        fs.open(&a, OpenMode::Read).unwrap().read_to_end().unwrap(),
        b"bee"
    );
    fs.remove_file(&a).unwrap();
    assert!(!fs.exists(&a).unwrap());
    assert_eq!(fs.remove_file(&a).unwrap_err().kind(), ErrorKind::NotFound);
    fs.sync_dir(&dir).unwrap();

    // Exclusive lock.
    let lock_path = dir.join("lock");
    let guard = fs.lock(&lock_path).unwrap();
    assert_eq!(
        fs.lock(&lock_path).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    drop(guard);
    let _again = fs.lock(&lock_path).unwrap();
}

#[test]
fn real_fs_with_pwrite_behaves_as_the_trait_says() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = RealFs::with_backend(IoBackend::Pwrite).unwrap();
    assert_eq!(fs.backend_description(), "pwrite + fdatasync");
    check(&fs, tmp.path());
}

#[test]
fn real_fs_with_io_uring_behaves_as_the_trait_says() {
    let tmp = tempfile::tempdir().unwrap();
    match RealFs::with_backend(IoBackend::Uring) {
        Ok(fs) => {
            assert_eq!(fs.backend(), &BackendInUse::Uring);
            check(&fs, tmp.path());
            // Linked write + sync.
            let f = fs
                .open(&tmp.path().join("linked"), OpenMode::CreateNew)
                .unwrap();
            f.write_all_and_sync_at(b"linked", 3).unwrap();
            assert_eq!(&f.read_to_end().unwrap()[3..], b"linked");
            direct_started_write(&fs, tmp.path());
        }
        Err(e) => {
            // The kernel refuses io_uring here: Auto must fall back and say so.
            let auto = RealFs::new();
            assert!(matches!(
                auto.backend(),
                BackendInUse::Pwrite {
                    fallback_reason: Some(_)
                }
            ));
            eprintln!(
                "io_uring unavailable ({e}); Auto fell back: {}",
                auto.backend_description()
            );
            check(&auto, tmp.path());
        }
    }
}

#[test]
fn io_uring_errors_keep_their_kind() {
    if RealFs::with_backend(IoBackend::Uring).is_err() {
        return; // covered by the fallback test above
    }
    let tmp = tempfile::tempdir().unwrap();
    let fs = RealFs::with_backend(IoBackend::Uring).unwrap();
    let path = tmp.path().join("ro");
    drop(fs.open(&path, OpenMode::CreateNew).unwrap());
    let ro = fs.open(&path, OpenMode::Read).unwrap();
    let e = ro.write_all_at(b"x", 0).unwrap_err();
    assert!(e.to_string().contains("ro"), "{e}");
    assert_eq!(
        e.raw_os_error().or_else(|| {
            e.get_ref()
                .and_then(|i| i.downcast_ref::<quorumlog_io::PathError>())
                .and_then(|p| p.source.raw_os_error())
        }),
        Some(libc_ebadf())
    );
}

fn libc_ebadf() -> i32 {
    9 // EBADF: writing through a read-only descriptor
}

#[test]
fn sim_fs_behaves_as_the_trait_says() {
    check(&SimFs::new(1), Path::new("/root"));
}

/// A started write on a direct (`O_DIRECT | O_DSYNC`) handle goes out
/// through `io_uring` while the caller goes on, and lands whole.
fn direct_started_write(fs: &RealFs, root: &Path) {
    let path = root.join("direct");
    let f = fs.open(&path, OpenMode::CreateNew).unwrap();
    f.write_all_at(&[0u8; 16384], 0).unwrap();
    f.sync_all().unwrap();
    let d = match fs.open(&path, OpenMode::DirectWrite) {
        Ok(d) => d,
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => {
            eprintln!("no direct I/O here ({e}): skipped");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let align = usize::try_from(quorumlog_io::DIRECT_ALIGN).unwrap();
    let mut buf = vec![0u8; 3 * align];
    let skip = (align - buf.as_ptr() as usize % align) % align;
    buf[skip..skip + 2 * align].fill(b'd');
    let ticket = d.start_write_at(buf, skip..skip + 2 * align, 4096);
    let (_, r) = d.finish_write(ticket);
    r.unwrap();
    let all = f.read_to_end().unwrap();
    assert!(all[..4096].iter().all(|&b| b == 0));
    assert!(all[4096..4096 + 2 * align].iter().all(|&b| b == b'd'));
    assert!(all[4096 + 2 * align..].iter().all(|&b| b == 0));
}
