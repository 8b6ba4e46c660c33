//! [`TableHandler`]: an embedding [`Table`] as a server's [`RequestHandler`] for `f32` values,
//! and [`serve_tables`], which serves a list of specs on a server node.

use super::spec::{bytes_text, TableSpec};
use super::table::{Table, TableCounts};
use crate::error::{Error, Result};
use crate::kv::pairs::{KVPairs, KVRequest};
use crate::kv::server::{KVServer, ReqMeta, RequestHandler};
use crate::metrics::TableMetrics;
use crate::postoffice::{Postoffice, Range};
use std::sync::Arc;

/// The most values (keys × dim) one request may ask a table for: 1 GiB of `f32`s.
pub const MAX_VALUES: usize = 1 << 28;

/// Answers one application's requests from an embedding table: a pull gets each key's row
/// (`dim` values; the initial row for a key not held), a push carries one gradient row per key
/// and applies one optimizer step to each, a push-pull answers with the rows after the step.
///
/// Requests: application command 0 only; keys sorted and unique (the worker's API checks);
/// `lens` empty or all equal to `dim`; a push's values `keys · dim`; at most [`MAX_VALUES`]
/// values. Anything else is refused
/// with a text naming the table, the key and both lengths, and nothing of the request is
/// applied. Zero-copy (rendezvous) pulls are not served: rows are computed for keys not held.
///
/// Durable with a checkpoint (`PS_CHECKPOINT_DIR`): [`save_into`](RequestHandler::save_into)
/// and [`restore`](RequestHandler::restore) carry the whole table ([`Table::save_into`]), and
/// the log's pushes replay to the same table (pulls change nothing).
pub struct TableHandler {
    table: Table,
    metrics: Option<TableMetrics>,
    published: TableCounts,
}

impl TableHandler {
    /// A handler with an empty table for `spec`.
    ///
    /// # Errors
    /// The spec's error ([`Table::new`]).
    pub fn new(spec: &TableSpec) -> std::result::Result<TableHandler, String> {
        Ok(TableHandler {
            table: Table::new(spec)?,
            metrics: None,
            published: TableCounts::default(),
        })
    }

    /// Reports into `metrics` after every request (rows, bytes, budget and the counts).
    #[must_use]
    pub fn with_metrics(mut self, metrics: TableMetrics) -> TableHandler {
        metrics
            .budget
            .set(self.table.spec().budget.unwrap_or(0) as i64);
        self.metrics = Some(metrics);
        self.publish();
        self
    }

    /// The table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    fn publish(&mut self) {
        let Some(m) = &self.metrics else { return };
        let (now, was) = (self.table.counts(), self.published);
        m.rows.set(self.table.len() as i64);
        m.bytes.set(self.table.bytes() as i64);
        m.admitted.inc_by(now.admitted.saturating_sub(was.admitted));
        m.not_admitted
            .inc_by(now.not_admitted.saturating_sub(was.not_admitted));
        m.evicted.inc_by(now.evicted.saturating_sub(was.evicted));
        m.initialized_on_pull.inc_by(
            now.initialized_on_pull
                .saturating_sub(was.initialized_on_pull),
        );
        self.published = now;
    }

    /// Checks the request's shape against the table.
    fn check(&self, meta: &ReqMeta, req: &KVRequest<'_, f32>) -> std::result::Result<(), String> {
        let (app, dim) = (self.table.spec().app, self.table.dim());
        if meta.cmd != 0 {
            return Err(format!(
                "table app {app}: application command {} is not a table request: a table takes pushes of gradients and pulls (command 0)",
                meta.cmd
            ));
        }
        if !req.lens.is_empty() && req.lens.len() != req.keys.len() {
            return Err(format!(
                "table app {app}: {} lengths for {} keys",
                req.lens.len(),
                req.keys.len()
            ));
        }
        if req.keys.len().saturating_mul(dim) > MAX_VALUES {
            return Err(format!(
                "table app {app}: {} keys of dim {dim} are {} values, more than a table answers in one request ({MAX_VALUES}): split the request",
                req.keys.len(),
                req.keys.len().saturating_mul(dim)
            ));
        }
        if !req.lens.is_empty() {
            if let Some((k, l)) = req
                .keys
                .iter()
                .zip(req.lens.iter())
                .find(|&(_, &l)| l as usize != dim)
            {
                return Err(format!(
                    "table app {app}: key {k} has {l} values, the table's rows have dim {dim}"
                ));
            }
        }
        if meta.push && req.vals.len() != req.keys.len() * dim {
            return Err(format!(
                "table app {app}: a push of {} values for {} keys; the table's rows have dim {dim}, so {} values",
                req.vals.len(),
                req.keys.len(),
                req.keys.len() * dim
            ));
        }
        Ok(())
    }
}

impl RequestHandler<f32> for TableHandler {
    fn handle(
        &mut self,
        meta: &ReqMeta,
        req: KVRequest<'_, f32>,
    ) -> std::result::Result<KVPairs<f32>, String> {
        self.check(meta, &req)?;
        let n = req.keys.len() * self.table.dim();
        let mut vals = Vec::new();
        if meta.push {
            if meta.pull {
                vals = vec![0.0; n];
            }
            let out = meta.pull.then_some(&mut vals[..]);
            self.table.push(&req.keys, &req.vals, out)?;
        } else if meta.pull {
            vals = vec![0.0; n];
            self.table.pull(&req.keys, &mut vals)?;
        }
        self.publish();
        Ok(KVPairs {
            keys: Vec::new(),
            vals,
            lens: Vec::new(),
        })
    }

    /// The whole table ([`Table::save_into`]).
    fn save(&self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.table.save_into(&mut out);
        Some(out)
    }

    fn save_into(&self, out: &mut Vec<u8>) -> bool {
        self.table.save_into(out);
        true
    }

    /// The rows of `range`, taken out of the table ([`Table::take_range`]).
    fn export_range(&mut self, range: Range) -> std::result::Result<Vec<u8>, String> {
        let rows = self.table.take_range(range);
        self.publish();
        Ok(rows)
    }

    /// Rows moved here ([`Table::put_rows`]).
    fn import_range(&mut self, range: Range, rows: &[u8]) -> std::result::Result<(), String> {
        let put = self.table.put_rows(range, rows);
        self.publish();
        put
    }

    fn restore(&mut self, state: &[u8]) -> std::result::Result<(), String> {
        self.table.restore(state)?;
        self.published = TableCounts::default();
        self.publish();
        Ok(())
    }
}

/// One line on what the table of `spec` did, from its metrics: `table app A: N rows, B bytes
/// (budget …), admitted, not admitted, evicted, initialized on pull`.
pub fn summary(spec: &TableSpec, m: &TableMetrics) -> String {
    let budget = spec
        .budget
        .map_or_else(|| "no budget".to_string(), |b| format!("budget {b}"));
    format!(
        "table app {}: {} rows, {} bytes ({budget}); {} rows admitted, {} pushed rows not admitted, {} evicted, {} initialized on pull",
        spec.app,
        m.rows.get(),
        m.bytes.get(),
        m.admitted.get(),
        m.not_admitted.get(),
        m.evicted.get(),
        m.initialized_on_pull.get()
    )
}

/// This host's memory in bytes (`MemTotal` of `/proc/meminfo`), `None` where unknown.
pub fn host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A table's budget against this host's memory, for a server's start line.
pub fn describe_budget(table: &Table, host: Option<u64>) -> String {
    let spec = table.spec();
    match (spec.budget, table.max_rows()) {
        (Some(b), Some(rows)) => {
            let share = host
                .map(|h| {
                    format!(
                        ", {:.1} % of this host's {:.1} GiB",
                        b as f64 * 100.0 / h as f64,
                        h as f64 / f64::from(1 << 30)
                    )
                })
                .unwrap_or_default();
            format!(
                "budget {} ({} bytes) for up to {rows} rows{share}",
                bytes_text(b),
                b
            )
        }
        _ => "no budget: it grows with its keys".to_string(),
    }
}

/// Checks `specs` as a server will serve them, before it joins a cluster: each makes a table
/// (its spec's ranges, a budget that holds a row), and no two name one application.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the spec or the application.
pub fn check_specs(specs: &[TableSpec]) -> Result<()> {
    one_per_app(specs)?;
    for spec in specs {
        Table::new(spec).map_err(Error::InvalidArgument)?;
    }
    Ok(())
}

/// Refuses two specs of one application.
fn one_per_app(specs: &[TableSpec]) -> Result<()> {
    match specs
        .iter()
        .enumerate()
        .find(|&(i, spec)| specs[..i].iter().any(|s| s.app == spec.app))
    {
        Some((_, spec)) => Err(Error::InvalidArgument(format!(
            "two tables for application {}: one table per application id",
            spec.app
        ))),
        None => Ok(()),
    }
}

/// Serves each of `specs` as a [`KVServer<f32>`] of its application on this server node, with
/// its metrics, printing one line per table on standard error (`pslite: table app A: SPEC;
/// budget … for up to N rows, P % of this host's M GiB`) and warning when the budgets add up
/// to more than 90 % of the host's memory. Dropping the servers
/// stops serving.
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad spec, two tables of one application, or an application
/// this process already serves as `f32`.
pub fn serve_tables(po: &Arc<Postoffice>, specs: &[TableSpec]) -> Result<Vec<KVServer<f32>>> {
    one_per_app(specs)?;
    let host = host_memory();
    let mut servers = Vec::with_capacity(specs.len());
    for spec in specs {
        let mut handler = TableHandler::new(spec)
            .map_err(Error::InvalidArgument)?
            .with_metrics(po.metrics().table(spec.app));
        handler.table.set_threads(po.config().kv.table_threads);
        eprintln!(
            "pslite: table app {}: {}; {}",
            spec.app,
            spec,
            describe_budget(handler.table(), host)
        );
        servers.push(KVServer::new(po, spec.app, handler)?);
    }
    let total: u64 = specs.iter().filter_map(|s| s.budget).sum();
    if let Some(h) = host {
        if total as f64 > 0.9 * h as f64 {
            tracing::warn!(
                "the tables' budgets add up to {} bytes, {:.0} % of this host's memory ({h} bytes): the server may run out of memory before its tables are full",
                total,
                total as f64 * 100.0 / h as f64
            );
        }
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use prometheus_client::metrics::gauge::Gauge;
    use std::borrow::Cow;

    fn meta(push: bool, pull: bool, cmd: i32) -> ReqMeta {
        ReqMeta {
            cmd,
            push,
            pull,
            sender: 9,
            timestamp: 0,
        }
    }

    fn req<'a>(keys: &'a [u64], vals: &'a [f32], lens: &'a [u32]) -> KVRequest<'a, f32> {
        KVRequest {
            keys: Cow::Borrowed(keys),
            vals: Cow::Borrowed(vals),
            lens: Cow::Borrowed(lens),
            memo: None,
        }
    }

    #[test]
    fn the_metrics_count_what_the_table_did() {
        let m = Metrics::new("zmq", Gauge::default(), |_| {});
        let spec: TableSpec = "app=7,dim=2,admit=count:2:width=64,budget=64KiB"
            .parse()
            .expect("spec");
        let mut h = TableHandler::new(&spec)
            .expect("table")
            .with_metrics(m.table(7));
        // Pulls of three keys not held; a push of two (not admitted), again (admitted).
        h.handle(&meta(false, true, 0), req(&[1, 2, 3], &[], &[]))
            .expect("pull");
        for _ in 0..2 {
            h.handle(&meta(true, false, 0), req(&[1, 2], &[0.5; 4], &[]))
                .expect("push");
        }
        let text = m.render();
        for line in [
            r#"pslite_table_rows{app="7"} 2"#,
            r#"pslite_table_budget_bytes{app="7"} 65536"#,
            r#"pslite_table_admitted_rows_total{app="7"} 2"#,
            r#"pslite_table_not_admitted_total{app="7"} 2"#,
            r#"pslite_table_evicted_rows_total{app="7"} 0"#,
            r#"pslite_table_initialized_on_pull_total{app="7"} 3"#,
        ] {
            assert!(text.contains(line), "no {line} in:\n{text}");
        }
        assert!(summary(&spec, &m.table(7)).contains("2 rows, "));
    }

    #[test]
    fn requests_that_do_not_fit_the_table_are_refused_by_name() {
        let spec: TableSpec = "app=7,dim=2".parse().expect("spec");
        let mut h = TableHandler::new(&spec).expect("table");
        let e = h
            .handle(&meta(true, false, 3), req(&[1], &[0.5; 2], &[]))
            .expect_err("a command");
        assert!(
            e.contains("table app 7: application command 3 is not a table request"),
            "{e}"
        );
        let e = h
            .handle(&meta(true, false, 0), req(&[1, 4], &[0.5; 5], &[2, 3]))
            .expect_err("lens");
        assert_eq!(
            e,
            "table app 7: key 4 has 3 values, the table's rows have dim 2"
        );
        let e = h
            .handle(&meta(true, true, 0), req(&[1, 4], &[0.5; 3], &[]))
            .expect_err("width");
        assert!(
            e.contains("a push of 3 values for 2 keys; the table's rows have dim 2, so 4 values"),
            "{e}"
        );
        let e = h
            .handle(&meta(true, false, 0), req(&[1, 4], &[0.5; 4], &[2]))
            .expect_err("lens");
        assert_eq!(e, "table app 7: 1 lengths for 2 keys");
        // 257 keys of the widest rows: past MAX_VALUES, refused before anything is allocated.
        let wide: TableSpec = "app=8,dim=1048576".parse().expect("spec");
        let mut w = TableHandler::new(&wide).expect("table");
        let many: Vec<u64> = (0..257).collect();
        let e = w
            .handle(&meta(false, true, 0), req(&many, &[], &[]))
            .expect_err("too many values");
        assert!(
            e.contains("more than a table answers in one request"),
            "{e}"
        );
        assert!(h.table().is_empty(), "nothing applied");
    }
}
