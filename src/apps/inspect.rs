//! `pslite-launch inspect DIR`: what a checkpoint directory (`PS_CHECKPOINT_DIR`) holds, read
//! without changing it — per server and application, the snapshot's generation and size, the
//! requests logged since, and for the default handler the keys, their lengths and a sample of
//! values as the server would restore them (snapshot plus log).

use crate::error::{Error, Result};
use crate::kv::durable::checkpoint::Checkpoint;
use crate::kv::durable::record::Entry;
use crate::kv::server::durable::rebuild;
use crate::kv::{DefaultHandler, Value};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Keys shown per application.
const SAMPLE: usize = 5;

/// The report on checkpoint directory `dir`: one block per `server-R/appA-T` directory.
///
/// # Errors
/// [`Error::Config`] when `dir` holds no checkpoint or cannot be read; [`Error::Corrupt`]
/// naming the file and offset of any damage (the same error a restarting server would give).
pub fn inspect(dir: &Path) -> Result<String> {
    let apps = app_dirs(dir)?;
    if apps.is_empty() {
        return Err(Error::Config(format!(
            "{}: no checkpoint here (expected server-R/appA-T directories; is it \
             PS_CHECKPOINT_DIR?)",
            dir.display()
        )));
    }
    let mut out = String::new();
    for app in apps {
        out.push_str(&describe(&app)?);
    }
    Ok(out)
}

/// The `server-*/app*` directories under `dir`, sorted.
fn app_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let list = |d: &Path| -> Result<Vec<PathBuf>> {
        let rd = std::fs::read_dir(d)
            .map_err(|e| Error::Config(format!("{}: cannot list: {e}", d.display())))?;
        let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        v.sort();
        Ok(v)
    };
    let name = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string()
    };
    let mut out = Vec::new();
    for server in list(dir)?
        .into_iter()
        .filter(|p| name(p).starts_with("server-"))
    {
        out.extend(
            list(&server)?
                .into_iter()
                .filter(|p| name(p).starts_with("app")),
        );
    }
    Ok(out)
}

/// One application's block.
fn describe(app: &Path) -> Result<String> {
    let (mut applied, restored) = Checkpoint::read(app)?;
    let (generation, run) = (restored.generation, restored.run);
    let entries = restored.entries()?;
    let (mut requests, mut lists) = (0, 0);
    for (_, e) in &entries {
        applied.note(e);
        match e {
            Entry::Applied(_) => requests += 1,
            Entry::KeyList { .. } => lists += 1,
            Entry::Forget(_) => {}
        }
    }
    let name = app.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dtype = name.rsplit('-').next().unwrap_or("");
    let mut out = format!(
        "{}: run {run:#018x}, generation {generation}, snapshot {} bytes (handler state {} bytes), log {} bytes: \
         {requests} requests and {lists} key lists since{}, {} recent requests remembered\n",
        app.display(),
        restored.snapshot_bytes,
        restored.state.len(),
        restored.log.len(),
        restored.torn_at.map_or(String::new(), |at| format!(
            ", a torn last record at byte {at}"
        )),
        applied.len()
    );
    let values = match (name.starts_with("app0-"), dtype) {
        (true, "f32") => keys_of::<f32>(app, &restored, &entries)?,
        (true, "f64") => keys_of::<f64>(app, &restored, &entries)?,
        (true, "i32") => keys_of::<i32>(app, &restored, &entries)?,
        (true, "i64") => keys_of::<i64>(app, &restored, &entries)?,
        (true, "u8") => keys_of::<u8>(app, &restored, &entries)?,
        (true, "u32") => keys_of::<u32>(app, &restored, &entries)?,
        (true, "u64") => keys_of::<u64>(app, &restored, &entries)?,
        _ => "  (not the default handler's state: keys not shown)\n".to_string(),
    };
    out.push_str(&values);
    Ok(out)
}

/// The default handler's keys after a restore: count, lengths, the first [`SAMPLE`] keys.
fn keys_of<V: Value>(
    app: &Path,
    restored: &crate::kv::durable::checkpoint::Restored,
    entries: &[(u64, Entry<'_>)],
) -> Result<String> {
    let mut h = DefaultHandler::<V>::new();
    rebuild(app, &mut h, restored, entries)?;
    let store = h.store();
    let mut keys = store.keys();
    keys.sort_unstable();
    let lens: Vec<usize> = keys
        .iter()
        .filter_map(|&k| h.get(k).map(<[V]>::len))
        .collect();
    let (lo, hi) = (
        lens.iter().min().copied().unwrap_or(0),
        lens.iter().max().copied().unwrap_or(0),
    );
    let mut out = format!(
        "  {} keys, {} values, lengths {lo}..={hi}\n",
        keys.len(),
        lens.iter().sum::<usize>()
    );
    for &k in keys.iter().take(SAMPLE) {
        let vals = h.get(k).unwrap_or(&[]);
        let shown: Vec<String> = vals.iter().take(4).map(|v| format!("{v:?}")).collect();
        let more = if vals.len() > 4 { ", …" } else { "" };
        let _ = writeln!(out, "  key {k}: [{}{more}]", shown.join(", "));
    }
    Ok(out)
}
