//! Fuzz-target logic, in the library so `cargo test` runs it over a fixed
//! corpus and CI needs no fuzzer.

use std::path::Path;
use std::sync::Arc;

use quorumlog_io::{FileSystem, OpenMode, SimFs};

use crate::format::{ChunkHeader, Footer, Header};
use crate::reader::SnapshotReader;

/// Arbitrary bytes as a snapshot file (and as a header, chunk header and
/// footer): never panics, never allocates beyond bounded limits, accepts
/// only what re-encodes identically. Returns whether the whole file
/// verified.
///
/// # Panics
/// On a decoder bug.
pub fn decode_snapshot(bytes: &[u8]) -> bool {
    if let Ok(h) = Header::decode(bytes) {
        assert_eq!(h.encode(), bytes, "header re-encodes");
    }
    if let Ok(f) = Footer::decode(bytes) {
        assert_eq!(&f.encode()[..], bytes, "footer re-encodes");
    }
    if let Ok(c) = ChunkHeader::decode(bytes) {
        assert_eq!(
            Some(&c.encode()[..]),
            bytes.get(..12),
            "chunk header re-encodes"
        );
    }
    let fs = SimFs::new(0);
    let path = Path::new("/f.snapshot");
    let Ok(file) = fs.open(path, OpenMode::CreateNew) else {
        return false;
    };
    if file.write_all_at(bytes, 0).is_err() {
        return false;
    }
    let shared: Arc<dyn FileSystem> = Arc::new(fs);
    match SnapshotReader::open(shared.as_ref(), path) {
        Ok(mut r) => {
            let data = r.read_to_end();
            assert!(data.is_ok(), "a verified snapshot reads");
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::SnapshotId;
    use crate::store::SnapshotStore;
    use crate::writer::WriterOptions;
    use quorumlog_checkpoint::{Epoch, Offset};

    fn valid(zstd_level: Option<i32>) -> Vec<u8> {
        let fs: Arc<dyn FileSystem> = Arc::new(SimFs::new(1));
        let store = SnapshotStore::open(fs, Path::new("/s")).unwrap();
        let id = SnapshotId {
            end_offset: Offset(5),
            epoch: Epoch(1),
        };
        let mut w = store
            .create(
                id,
                b"m",
                WriterOptions {
                    chunk_bytes: 64,
                    zstd_level,
                },
            )
            .unwrap();
        w.write(&[7u8; 150]).unwrap();
        w.freeze().unwrap();
        store.read_chunk(id, 0, usize::MAX).unwrap()
    }

    #[test]
    fn corpus_never_panics_and_only_valid_files_verify() {
        let valid = [valid(None), valid(Some(1))];
        let mut corpus: Vec<Vec<u8>> = valid.to_vec();
        for v in &valid {
            for i in 0..v.len() {
                let mut b = v.clone();
                b[i] ^= 0x21;
                corpus.push(b);
                corpus.push(v[..i].to_vec());
            }
        }
        let accepted = corpus.iter().filter(|b| decode_snapshot(b)).count();
        assert_eq!(accepted, 2);
    }
}
