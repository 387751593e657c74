//! `quorumlog dump-snapshot`: one snapshot file verified end to end (as a
//! reader verifies it before handing out a byte) and described: its id,
//! compression, creation time, metadata, sizes, checksums and, with
//! `--chunks`, every chunk.

use crate::out::say;
use std::fmt::Write as _;
use std::path::Path;

use quorumlog_io::FileSystem;
use quorumlog_snapshot::{describe_snapshot, SnapshotDescription};
use serde_json::json;

/// Prints the description; Ok(false) when the file fails verification
/// (the problem is printed with its position).
pub(crate) fn run(
    fs: &dyn FileSystem,
    file: &Path,
    chunks: bool,
    json: bool,
) -> Result<bool, String> {
    if !fs
        .exists(file)
        .map_err(|e| format!("{}: {e}", file.display()))?
    {
        return Err(format!("{} does not exist", file.display()));
    }
    let d = match describe_snapshot(fs, file) {
        Ok(d) => d,
        Err(quorumlog_snapshot::Error::Io(e)) => return Err(format!("{}: {e}", file.display())),
        Err(e) => {
            if json {
                say!(
                    "{}",
                    json!({"type": "problem", "file": file.display().to_string(), "kind": e.to_string()})
                );
            } else {
                say!("DAMAGED {}: {e}", file.display());
            }
            return Ok(false);
        }
    };
    if json {
        print_json(file, &d, chunks);
    } else {
        print_text(file, &d, chunks);
    }
    Ok(true)
}

/// The first bytes of `m` in hex, for a glance at metadata.
fn hex_prefix(m: &[u8]) -> String {
    let shown = m.iter().take(32).fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    if m.len() > 32 {
        format!("{shown}…")
    } else {
        shown
    }
}

fn print_text(file: &Path, d: &SnapshotDescription, chunks: bool) {
    say!(
        "{}: snapshot {} (end offset {}, epoch {}), verified",
        file.display(),
        d.id,
        d.id.end_offset.0,
        d.id.epoch.0
    );
    say!(
        "created {}; compression {}; {} bytes of state in {} chunks; file {} bytes, crc32c {:#010x}",
        crate::units::iso8601_ms(d.created_ms),
        d.compression,
        d.data_len,
        d.chunks.len(),
        d.total_len,
        d.file_crc
    );
    say!(
        "metadata: {} bytes {}",
        d.metadata.len(),
        hex_prefix(&d.metadata)
    );
    if chunks {
        for (i, c) in d.chunks.iter().enumerate() {
            say!(
                "chunk {i} at {}: {} bytes stored, {} raw, crc32c {:#010x}",
                c.position,
                c.stored_len,
                c.raw_len,
                c.crc
            );
        }
    }
}

fn print_json(file: &Path, d: &SnapshotDescription, chunks: bool) {
    say!(
        "{}",
        json!({
            "type": "snapshot", "file": file.display().to_string(),
            "end_offset": d.id.end_offset.0, "epoch": d.id.epoch.0,
            "created": crate::units::iso8601_ms(d.created_ms), "created_ms": d.created_ms,
            "compression": d.compression,
            "data_len": d.data_len, "chunk_count": d.chunks.len(),
            "total_len": d.total_len, "file_crc": d.file_crc,
            "metadata_len": d.metadata.len(), "metadata_hex": hex_prefix(&d.metadata),
        })
    );
    if chunks {
        for (i, c) in d.chunks.iter().enumerate() {
            say!(
                "{}",
                json!({
                    "type": "chunk", "index": i, "position": c.position,
                    "stored_len": c.stored_len, "raw_len": c.raw_len, "crc": c.crc,
                })
            );
        }
    }
}
