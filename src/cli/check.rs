//! `liftbridge check DIR` and `liftbridge repair DIR`: offline verification
//! and repair of a stopped node's data directory.
//!
//! Layout read (the one `node` and `partition::manager` write):
//! `DIR/raft/raft.redb` (metadata) and `DIR/streams/<stream>/<partition>/`
//! holding `log.redb` and `log.journal`. The work on each file is done by
//! [`crate::store::check`] and [`crate::cluster::store::check_file`]; this
//! module walks the directory, prints, and picks the exit status:
//! 0 when everything is sound (or was repaired), 1 when something is
//! damaged (or could not be repaired), 2 when the check could not run
//! (directory unreadable, a node is running).
//!
//! Must not: write anything during `check`; repair while a node holds the
//! directory (the node's lock on `raft.redb` is taken for the whole repair).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::cluster::store::{check_file, RaftFileReport};
use crate::store::check::{
    check_partition, repair_partition, try_flock, CheckError, PartitionReport,
};

/// Arguments of `liftbridge check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Data directory of a stopped node (its `data_dir`).
    pub dir: PathBuf,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `liftbridge repair`.
#[derive(Debug, Clone, Args)]
pub struct RepairArgs {
    /// Data directory of a stopped node (its `data_dir`).
    pub dir: PathBuf,
    /// Only this stream.
    #[arg(long)]
    pub stream: Option<String>,
    /// Only this partition (with `--stream`).
    #[arg(long, requires = "stream")]
    pub partition: Option<i32>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One partition as found in the directory.
#[derive(Debug, Clone, Serialize)]
struct PartitionEntry {
    stream: String,
    partition: String,
    #[serde(flatten)]
    report: Option<PartitionReport>,
    /// Set when the partition could not be checked at all.
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct CheckOutput {
    dir: PathBuf,
    ok: bool,
    raft: RaftEntry,
    partitions: Vec<PartitionEntry>,
}

#[derive(Debug, Serialize)]
struct RaftEntry {
    path: PathBuf,
    present: bool,
    #[serde(flatten)]
    report: Option<RaftFileReport>,
    error: Option<String>,
}

/// Runs `liftbridge check`.
pub fn run_check(args: CheckArgs) -> ExitCode {
    if !args.dir.is_dir() {
        eprintln!(
            "liftbridge check: {} is not a directory",
            args.dir.display()
        );
        return ExitCode::from(2);
    }
    let raft_path = args.dir.join("raft").join("raft.redb");
    let mut locked = false;
    let raft = match std::fs::metadata(&raft_path) {
        Err(_) => RaftEntry {
            path: raft_path.clone(),
            present: false,
            report: None,
            error: None,
        },
        Ok(_) => match check_file(&raft_path) {
            Ok(r) => RaftEntry {
                path: raft_path.clone(),
                present: true,
                report: Some(r),
                error: None,
            },
            Err(e) => {
                locked |= matches!(e, CheckError::Locked(_));
                RaftEntry {
                    path: raft_path.clone(),
                    present: true,
                    report: None,
                    error: Some(e.to_string()),
                }
            }
        },
    };
    let (found, walk_error) = match partitions(&args.dir) {
        Ok(p) => (p, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let mut entries = Vec::new();
    for (stream, partition, dir) in found {
        let (report, error) = match check_partition(&dir) {
            Ok(r) => (Some(r), None),
            Err(e) => {
                locked |= matches!(e, CheckError::Locked(_));
                (None, Some(e.to_string()))
            }
        };
        entries.push(PartitionEntry {
            stream,
            partition,
            report,
            error,
        });
    }
    let mut raft_problem = raft.error.clone().or_else(|| {
        raft.report
            .as_ref()
            .filter(|r| !r.problems.is_empty())
            .map(|r| r.problems.join("; "))
    });
    if !raft.present && !entries.is_empty() {
        raft_problem = Some(format!(
            "{} is missing but the directory holds stream data: a node refuses to start",
            raft_path.display()
        ));
    }
    let partitions_ok = entries
        .iter()
        .all(|e| e.error.is_none() && e.report.as_ref().is_some_and(|r| r.ok()));
    let ok = raft_problem.is_none() && partitions_ok && walk_error.is_none();
    if args.json {
        let out = CheckOutput {
            dir: args.dir.clone(),
            ok,
            raft,
            partitions: entries,
        };
        match serde_json::to_string_pretty(&out) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("liftbridge check: {e}"),
        }
    } else {
        print_raft(&raft, raft_problem.as_deref());
        print_table(&entries);
        if let Some(e) = &walk_error {
            println!("streams: {e}");
        }
        let damaged = entries
            .iter()
            .filter(|e| e.error.is_some() || e.report.as_ref().is_some_and(|r| !r.ok()))
            .count();
        println!(
            "{} partition(s) checked, {damaged} with problems; metadata {}",
            entries.len(),
            match (&raft.error, &raft_problem) {
                (Some(_), _) => "not checked",
                (None, Some(_)) => "damaged",
                (None, None) => "ok",
            }
        );
    }
    if locked || walk_error.is_some() {
        ExitCode::from(2)
    } else if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_raft(raft: &RaftEntry, problem: Option<&str>) {
    let path = raft.path.display();
    match (&raft.report, problem) {
        (_, Some(p)) if raft.error.is_some() => println!("metadata {path}: NOT CHECKED: {p}"),
        (_, Some(p)) => println!("metadata {path}: DAMAGED: {p}"),
        (Some(r), None) => println!(
            "metadata {path}: ok ({} log entries{}, snapshot {}{})",
            r.entries,
            r.last_index
                .map_or(String::new(), |i| format!(", last index {i}")),
            if r.snapshot { "yes" } else { "no" },
            r.identity
                .as_ref()
                .map_or(String::new(), |i| format!(", server id {}", i.server_id)),
        ),
        (None, None) => println!("metadata {path}: absent (no streams)"),
    }
}

fn opt(o: Option<u64>) -> String {
    o.map_or("-".into(), |o| o.to_string())
}

fn print_table(entries: &[PartitionEntry]) {
    if entries.is_empty() {
        println!("no partitions");
        return;
    }
    println!(
        "{:<24} {:>9} {:>12} {:>12} {:>10} {:>12} {:>12}  status",
        "stream", "partition", "first", "last", "records", "last good", "next offset"
    );
    for e in entries {
        let status = match (&e.report, &e.error) {
            (_, Some(err)) => format!("NOT CHECKED: {err}"),
            (Some(r), None) if r.ok() => "ok".to_string(),
            (Some(r), None) => format!("DAMAGED: {}", r.problems.join("; ")),
            (None, None) => "-".to_string(),
        };
        let r = e.report.clone().unwrap_or_default();
        println!(
            "{:<24} {:>9} {:>12} {:>12} {:>10} {:>12} {:>12}  {status}",
            e.stream,
            e.partition,
            opt(r.first_offset),
            opt(r.last_offset),
            r.records,
            opt(r.last_good_offset),
            r.next_offset,
        );
    }
}

/// Every partition directory under `dir/streams`, sorted: (stream,
/// partition, path). A stream directory's entries that are not
/// directories are not partitions and are skipped.
fn partitions(dir: &Path) -> Result<Vec<(String, String, PathBuf)>, String> {
    let streams = dir.join("streams");
    let read = |d: &Path| -> Result<Vec<(String, PathBuf)>, String> {
        let mut v = Vec::new();
        let it = match std::fs::read_dir(d) {
            Ok(it) => it,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(v),
            Err(e) => return Err(format!("{}: {e}", d.display())),
        };
        for entry in it {
            let entry = entry.map_err(|e| format!("{}: {e}", d.display()))?;
            let path = entry.path();
            if path.is_dir() {
                v.push((entry.file_name().to_string_lossy().into_owned(), path));
            }
        }
        v.sort();
        Ok(v)
    };
    let mut out = Vec::new();
    for (stream, sdir) in read(&streams)? {
        for (partition, pdir) in read(&sdir)? {
            out.push((stream.clone(), partition, pdir));
        }
    }
    Ok(out)
}

#[derive(Debug, Serialize)]
struct RepairEntry {
    stream: String,
    partition: String,
    /// `repaired`, `sound` or `failed`.
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<crate::store::check::RepairOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Runs `liftbridge repair`.
pub fn run_repair(args: RepairArgs) -> ExitCode {
    if !args.dir.is_dir() {
        eprintln!(
            "liftbridge repair: {} is not a directory",
            args.dir.display()
        );
        return ExitCode::from(2);
    }
    // The node holds raft.redb locked while it runs: hold that lock for the
    // whole repair so that no node starts meanwhile.
    let raft_path = args.dir.join("raft").join("raft.redb");
    let _raft_lock = match File::open(&raft_path) {
        Ok(f) => match try_flock(&f, true, &raft_path) {
            Ok(()) => Some(f),
            Err(e) => {
                eprintln!("liftbridge repair: {e}");
                return ExitCode::from(2);
            }
        },
        Err(_) => None,
    };
    let found = match partitions(&args.dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("liftbridge repair: {e}");
            return ExitCode::from(2);
        }
    };
    let selected: Vec<_> = found
        .into_iter()
        .filter(|(s, p, _)| {
            args.stream.as_ref().is_none_or(|w| w == s)
                && args.partition.is_none_or(|w| w.to_string() == *p)
        })
        .collect();
    if selected.is_empty() && (args.stream.is_some() || args.partition.is_some()) {
        eprintln!(
            "liftbridge repair: no such partition in {}",
            args.dir.display()
        );
        return ExitCode::FAILURE;
    }
    let mut results = Vec::new();
    let mut status = ExitCode::SUCCESS;
    for (stream, partition, dir) in selected {
        let entry = match repair_partition(&dir) {
            Ok(None) => RepairEntry {
                stream,
                partition,
                result: "sound",
                outcome: None,
                error: None,
            },
            Ok(Some(o)) => RepairEntry {
                stream,
                partition,
                result: "repaired",
                outcome: Some(o),
                error: None,
            },
            Err(e) => {
                status = if matches!(e, CheckError::Locked(_)) {
                    ExitCode::from(2)
                } else {
                    ExitCode::FAILURE
                };
                RepairEntry {
                    stream,
                    partition,
                    result: "failed",
                    outcome: None,
                    error: Some(e.to_string()),
                }
            }
        };
        if !args.json {
            print_repair(&entry);
        }
        results.push(entry);
    }
    if args.json {
        match serde_json::to_string_pretty(&results) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("liftbridge repair: {e}"),
        }
    }
    status
}

fn print_repair(e: &RepairEntry) {
    let name = format!("{} partition {}", e.stream, e.partition);
    match (&e.outcome, &e.error) {
        (_, Some(err)) => println!("{name}: NOT REPAIRED: {err}"),
        (None, None) => println!("{name}: sound, nothing to repair"),
        (Some(o), None) => {
            println!("{name}: REPAIRED");
            for p in &o.before.problems {
                println!("  found: {p}");
            }
            match o.before.last_good_offset {
                Some(g) => println!("  kept {} record(s), offsets up to {g}", o.kept_records),
                None => println!("  kept no record"),
            }
            if o.dropped_from < o.log_end {
                println!(
                    "  REMOVED offsets {}..{} ({} intact record(s) after the damage among them); \
                     they are lost unless a replica holds them",
                    o.dropped_from,
                    o.log_end - 1,
                    o.before.records_after_damage
                );
            }
            println!(
                "  the next append gets offset {}: no offset handed out before is reused",
                o.log_end
            );
            if let Some(k) = &o.kept_as {
                println!("  damaged file kept as {}", k.display());
            }
        }
    }
}
