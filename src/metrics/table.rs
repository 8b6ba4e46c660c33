//! An embedding table's metrics: rows, bytes and budget held, rows admitted, evicted and
//! initialized on pull, labelled by the application the table serves.

use super::TableLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// One embedding table's gauges and counters ([`Metrics::table`](super::Metrics::table)); the
/// table's handler sets them after each request.
#[derive(Clone, Debug, Default)]
pub struct TableMetrics {
    /// Rows held.
    pub rows: Gauge,
    /// Bytes held.
    pub bytes: Gauge,
    /// The budget in bytes, 0 for none.
    pub budget: Gauge,
    /// Rows created.
    pub admitted: Counter,
    /// Pushed rows dropped, key not admitted yet.
    pub not_admitted: Counter,
    /// Rows evicted.
    pub evicted: Counter,
    /// Pulled rows answered with their initial row.
    pub initialized_on_pull: Counter,
}

/// The table metrics' families.
#[derive(Default)]
pub(super) struct TableFamilies {
    rows: Family<TableLabels, Gauge>,
    bytes: Family<TableLabels, Gauge>,
    budget: Family<TableLabels, Gauge>,
    admitted: Family<TableLabels, Counter>,
    not_admitted: Family<TableLabels, Counter>,
    evicted: Family<TableLabels, Counter>,
    initialized_on_pull: Family<TableLabels, Counter>,
}

impl TableFamilies {
    /// The metrics of the table serving application `app`.
    pub(super) fn of(&self, app: i32) -> TableMetrics {
        let l = TableLabels { app };
        TableMetrics {
            rows: self.rows.get_or_create_owned(&l),
            bytes: self.bytes.get_or_create_owned(&l),
            budget: self.budget.get_or_create_owned(&l),
            admitted: self.admitted.get_or_create_owned(&l),
            not_admitted: self.not_admitted.get_or_create_owned(&l),
            evicted: self.evicted.get_or_create_owned(&l),
            initialized_on_pull: self.initialized_on_pull.get_or_create_owned(&l),
        }
    }

    /// Registers the families' metrics.
    pub(super) fn register(&self, r: &mut Registry) {
        let gauges = [
            (
                "pslite_table_rows",
                "(server) rows an embedding table holds",
                &self.rows,
            ),
            (
                "pslite_table_bytes",
                "(server) bytes an embedding table holds: records, index, sketch",
                &self.bytes,
            ),
            (
                "pslite_table_budget_bytes",
                "(server) an embedding table's budget in bytes (0: none)",
                &self.budget,
            ),
        ];
        for (name, help, family) in gauges {
            r.register(name, help, family.clone());
        }
        let counters = [
            (
                "pslite_table_admitted_rows",
                "(server) rows created: keys admitted",
                &self.admitted,
            ),
            (
                "pslite_table_not_admitted",
                "(server) pushed rows dropped because their key was not admitted yet",
                &self.not_admitted,
            ),
            (
                "pslite_table_evicted_rows",
                "(server) rows evicted (budget or TTL)",
                &self.evicted,
            ),
            (
                "pslite_table_initialized_on_pull",
                "(server) pulled rows the table did not hold, answered with their initial row",
                &self.initialized_on_pull,
            ),
        ];
        for (name, help, family) in counters {
            r.register(name, help, family.clone());
        }
    }
}
