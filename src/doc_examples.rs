//! The documentation's Markdown files as doctests: `cargo test` compiles and runs their
//! `rust` blocks (`no_run` ones are compiled only). `scripts/docs-check.sh` checks every other
//! block, and that every Markdown file of `docs/` is listed here; `docs/README.md` has the rule.

/// README.md
#[doc = include_str!("../README.md")]
pub struct Readme;

/// docs/README.md
#[doc = include_str!("../docs/README.md")]
pub struct DocsContents;

/// docs/running.md
#[doc = include_str!("../docs/running.md")]
pub struct Running;

/// docs/configuration.md
#[doc = include_str!("../docs/configuration.md")]
pub struct Configuration;

/// docs/tables.md
#[doc = include_str!("../docs/tables.md")]
pub struct Tables;

/// docs/staleness.md
#[doc = include_str!("../docs/staleness.md")]
pub struct Staleness;

/// docs/api.md
#[doc = include_str!("../docs/api.md")]
pub struct Api;

/// docs/security.md
#[doc = include_str!("../docs/security.md")]
pub struct Security;

/// docs/failures.md
#[doc = include_str!("../docs/failures.md")]
pub struct Failures;

/// docs/rdma.md
#[doc = include_str!("../docs/rdma.md")]
pub struct Rdma;

/// docs/observability.md
#[doc = include_str!("../docs/observability.md")]
pub struct Observability;

/// docs/limits.md
#[doc = include_str!("../docs/limits.md")]
pub struct Limits;

/// docs/layout.md
#[doc = include_str!("../docs/layout.md")]
pub struct Layout;
