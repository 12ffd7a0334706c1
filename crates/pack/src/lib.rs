//! The capacity pack's human-facing files, rendered from a [`BenchResult`]: `sweep.md`,
//! `plan.md`, the SVG plots and the terminal summary (and, in `proposal`, a replica
//! proposal's pull request). Every figure is in real-time units;
//! cache modes are always reported apart, never averaged.
//!
//! Rendering only: from the core's result types and the custom resources, no IO beyond
//! writing the files. Re-exported as `goodput::pack`.

// The core's modules and the custom resources under the names the renderers have always
// used (`bench` is the core's benchmark: its result, sweep and fidelity records).
use goodput_api as api;
use goodput_core::{
    analysis, benchmark as bench, engine_metrics, failure, pack_files, planning, workload,
};

pub(crate) mod figures;
mod markdown;
mod plot;
pub mod proposal;
mod rows;
mod summary;

use std::fs;
use std::path::Path;

pub use markdown::{plan_markdown, sweep_markdown};
pub use plot::write_plots;
pub use summary::summary_text;

use crate::bench::result::BenchResult;

/// Writes `sweep.md` and `plan.md` into `dir`, and the plots into `dir/plots/`.
pub fn write_reports(dir: &Path, result: &BenchResult) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join(pack_files::SWEEP_MD), sweep_markdown(result))?;
    fs::write(dir.join(pack_files::PLAN_MD), plan_markdown(result))?;
    write_plots(&dir.join(pack_files::PLOTS), result)?;
    if !result.failure_tests.is_empty() {
        fs::write(
            dir.join(pack_files::FAILURE_TEST_MD),
            crate::failure::report::render(&result.failure_tests),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
