//! The node's record of which partitions have held records, kept outside
//! the partitions' own directories.
//!
//! Role: a partition log whose database file and journal are both gone
//! (its whole directory deleted while the node was down) looks exactly like
//! a partition that never held a record, and would start again at offset 0,
//! handing out offsets that were already acknowledged. So, before a log
//! writes its first record (its database file is created then), the node
//! notes durably in `<data dir>/held/<stream>/<partition>` the stream
//! incarnation (its creation time) the partition belongs to. At start-up a
//! partition whose note exists but whose database file does not is refused
//! (see `PartitionManager::open_log`) instead of being recreated empty.
//!
//! Invariants:
//! - a note is durable (file and directory synced) before the log's first
//!   record is written, so no acknowledged record exists without it;
//! - a note names one stream incarnation: a stream deleted and created
//!   again under the same name is a new partition, not a lost one;
//! - a note is removed when the partition's files are removed on purpose
//!   (stream deleted, a follower's copy rebuilt).
//!
//! Must not: decide anything about a partition whose note is missing (the
//! log's own files decide then, as before), or be read on a hot path — it is
//! read when a partition opens and written once per partition lifetime.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Name of the registry's directory in the data directory.
pub const DIR: &str = "held";

/// The registry of one node (cheap to clone: only its directory).
#[derive(Debug, Clone)]
pub struct Held {
    dir: PathBuf,
}

impl Held {
    /// The registry under `data_dir`.
    pub fn new(data_dir: &Path) -> Held {
        Held {
            dir: data_dir.join(DIR),
        }
    }

    fn note(&self, stream: &str, id: i32) -> PathBuf {
        self.dir.join(stream).join(id.to_string())
    }

    /// Whether partition `id` of the stream incarnation created at
    /// `creation_ns` has held records here. An unreadable or foreign note
    /// counts as not held: the log's own files then decide, as for a node
    /// without a registry.
    pub fn holds(&self, stream: &str, id: i32, creation_ns: i64) -> bool {
        std::fs::read_to_string(self.note(stream, id))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            == Some(creation_ns)
    }

    /// Notes durably that the partition holds records (no-op when already
    /// noted). Blocking.
    pub fn record(&self, stream: &str, id: i32, creation_ns: i64) -> std::io::Result<()> {
        if self.holds(stream, id, creation_ns) {
            return Ok(());
        }
        let stream_dir = self.dir.join(stream);
        let created_stream_dir = !stream_dir.exists();
        std::fs::create_dir_all(&stream_dir)?;
        let note = self.note(stream, id);
        let tmp = stream_dir.join(format!(".{id}.tmp"));
        {
            let mut f = std::fs::File::create(&tmp)?;
            writeln!(f, "{creation_ns}")?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &note)?;
        sync_dir(&stream_dir)?;
        if created_stream_dir {
            // The new stream directory's own entry must be durable too.
            sync_dir(&self.dir)?;
            if let Some(parent) = self.dir.parent() {
                sync_dir(parent)?;
            }
        }
        Ok(())
    }

    /// Forgets the partition (its files were removed on purpose). Blocking.
    pub fn forget(&self, stream: &str, id: i32) {
        let _ = std::fs::remove_file(self.note(stream, id));
        // The stream's directory goes with its last note.
        let _ = std::fs::remove_dir(self.dir.join(stream));
    }

    /// Forgets every partition of a stream. Blocking.
    pub fn forget_stream(&self, stream: &str) {
        let _ = std::fs::remove_dir_all(self.dir.join(stream));
    }

    /// A hook for `LogConfig::first_record` that notes the partition.
    pub fn hook(&self, stream: &str, id: i32, creation_ns: i64) -> crate::store::FirstRecord {
        let me = self.clone();
        let stream = stream.to_owned();
        crate::store::FirstRecord::new(move || me.record(&stream, id, creation_ns))
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_per_incarnation_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let held = Held::new(dir.path());
        assert!(!held.holds("s", 0, 7));
        held.record("s", 0, 7).unwrap();
        held.record("s", 0, 7).unwrap();
        assert!(held.holds("s", 0, 7));
        assert!(!held.holds("s", 1, 7), "another partition");
        assert!(
            !held.holds("s", 0, 8),
            "a recreated stream is another incarnation"
        );
        // A new incarnation replaces the note.
        held.record("s", 0, 8).unwrap();
        assert!(held.holds("s", 0, 8) && !held.holds("s", 0, 7));
        held.record("s", 1, 8).unwrap();
        held.forget("s", 0);
        assert!(!held.holds("s", 0, 8) && held.holds("s", 1, 8));
        held.forget_stream("s");
        assert!(!held.holds("s", 1, 8));
        assert!(!dir.path().join(DIR).join("s").exists());
        // The hook records.
        let hook = held.hook("t", 3, 9);
        hook.run().unwrap();
        assert!(held.holds("t", 3, 9));
        // A damaged note is not trusted either way.
        std::fs::write(dir.path().join(DIR).join("t").join("3"), b"garbage").unwrap();
        assert!(!held.holds("t", 3, 9));
    }
}
