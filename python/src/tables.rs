//! Embedding tables from Python: `table_spec` (pslite's own spec parser, so that a spec reads
//! and fails the same from Python as from `pslite-server --table`) and the specs that
//! `run_server(tables=[…])` serves.

use crate::errors::invalid;
use pslite::kv::table::TableSpec;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// A spec line parsed by pslite's parser.
///
/// Raises `InvalidArgumentError` with the parser's text ("bad table spec 'LINE': FIELD: …").
pub fn parse(line: &str) -> PyResult<TableSpec> {
    line.parse::<TableSpec>().map_err(invalid)
}

/// The canonical form of the table spec `line` (every field, in the order `app, dim, init,
/// seed, opt, admit, budget, evict`), as `pslite-server` prints it when it serves the table.
///
/// Raises `InvalidArgumentError` with the text `pslite-server --table LINE` gives: "invalid
/// argument: bad table spec 'LINE': dim: '0': allowed: 1 to 1048576".
#[pyfunction]
pub fn table_spec(line: &str) -> PyResult<String> {
    Ok(parse(line)?.to_string())
}

/// The specs of `run_server(tables=…)`: an iterable of `pslite.Table` objects and spec lines
/// (str), each parsed; `None` is none.
pub fn specs_of(tables: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<TableSpec>> {
    let Some(tables) = tables.filter(|t| !t.is_none()) else {
        return Ok(Vec::new());
    };
    if tables.is_instance_of::<PyString>() {
        return Err(invalid(
            "run_server(tables=…): a str, not a list of tables: give [spec] (a list of \
             pslite.Table objects or spec lines)",
        ));
    }
    let table_class = tables.py().import("pslite._tables")?.getattr("Table")?;
    let mut specs = Vec::new();
    let items = tables.try_iter().map_err(|_| {
        invalid(format!(
            "run_server(tables={}): expected a list of pslite.Table objects or spec lines",
            tables.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    for (i, item) in items.enumerate() {
        let item = item?;
        let line: String = if item.is_instance_of::<PyString>() {
            item.extract()?
        } else if item.is_instance(&table_class)? {
            item.getattr("spec")?.extract()?
        } else {
            let type_name = item
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "object".into());
            let text = item.repr().map(|r| r.to_string()).unwrap_or_default();
            return Err(invalid(format!(
                "run_server(tables=…): item {i} is {text} ({type_name}): expected a pslite.Table \
                 or a spec line (str) such as \"app=1,dim=16,opt=adagrad:lr=0.05\""
            )));
        };
        specs.push(parse(&line)?);
    }
    Ok(specs)
}
