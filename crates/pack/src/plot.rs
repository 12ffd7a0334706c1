//! The sweep plots (SVG): offered rate against completed rate, goodput, per-class
//! attainment and P95 latencies, one series per cache mode (and class). Repeats of a rate
//! are drawn as their mean.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::figures::mode_name;
use super::rows::{point_rows, rate_groups};
use crate::analysis::{ClassReport, ClassSlo, GateConfig, mean};
use crate::bench::result::{BenchResult, ModeResult, PointResult};
use crate::pack_files;

/// Size of every plot in pixels.
const SIZE: (u32, u32) = (960, 600);

/// Writes `throughput.svg`, `goodput.svg`, `attainment.svg`, `ttft_p95.svg` and
/// `tpot_p95.svg` into `dir` (created if needed) and returns their paths. Repeats of a rate
/// are plotted as their mean; missing values are left out; an empty sweep gives empty axes
/// that say so.
pub fn write_plots(dir: &Path, result: &BenchResult) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let charts = [
        (pack_files::THROUGHPUT_SVG, throughput_chart(result)),
        (pack_files::GOODPUT_SVG, goodput_chart(result)),
        (pack_files::ATTAINMENT_SVG, attainment_chart(result)),
        (
            pack_files::TTFT_P95_SVG,
            latency_chart(result, Latency::Ttft),
        ),
        (
            pack_files::TPOT_P95_SVG,
            latency_chart(result, Latency::Tpot),
        ),
    ];
    let mut written = Vec::with_capacity(charts.len());
    for (file, chart) in charts {
        let path = dir.join(file);
        fs::write(&path, render_svg(&chart)?)?;
        written.push(path);
    }
    Ok(written)
}

/// One line of a chart: (offered RPS, value) points sorted by rate.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    /// Drawn dashed (every cache mode after the first), so modes stay apart where they
    /// overlap.
    dashed: bool,
}

/// A dashed reference line.
#[derive(Clone, Debug, PartialEq)]
enum Guide {
    /// y = x, labelled.
    Diagonal(String),
    /// y = the value, labelled, in a colour.
    Horizontal(String, f64, RGBColor),
}

/// Everything a chart shows.
#[derive(Clone, Debug, PartialEq)]
struct Chart {
    title: String,
    y_desc: String,
    series: Vec<Series>,
    guides: Vec<Guide>,
    /// Fix the y axis to at most this (attainment: 1), rather than the data's maximum.
    y_cap: Option<f64>,
    legend: SeriesLabelPosition,
}

fn throughput_chart(result: &BenchResult) -> Chart {
    Chart {
        title: "Completed vs offered rate".into(),
        y_desc: "completed requests/s".into(),
        series: mode_series(result, |p| Some(p.report.request_throughput_rps)),
        guides: vec![Guide::Diagonal("offered".into())],
        y_cap: None,
        legend: SeriesLabelPosition::UpperLeft,
    }
}

fn goodput_chart(result: &BenchResult) -> Chart {
    Chart {
        title: "Goodput (requests meeting their class SLO) vs offered rate".into(),
        y_desc: "goodput requests/s".into(),
        series: mode_series(result, |p| Some(p.report.observed_goodput_rps)),
        guides: vec![Guide::Diagonal("offered".into())],
        y_cap: None,
        legend: SeriesLabelPosition::UpperLeft,
    }
}

fn attainment_chart(result: &BenchResult) -> Chart {
    let min = result.gate.attainment_min;
    Chart {
        title: "Per-class SLO attainment vs offered rate".into(),
        y_desc: "attainment (fraction of successful requests)".into(),
        series: class_series(result, |c| c.attainment),
        guides: vec![Guide::Horizontal(
            format!("gate {}", super::figures::rate(min)),
            min,
            RED,
        )],
        y_cap: Some(1.0),
        legend: SeriesLabelPosition::LowerLeft,
    }
}

/// Which latency a chart shows.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Latency {
    Ttft,
    Tpot,
}

impl Latency {
    fn name(self) -> &'static str {
        match self {
            Latency::Ttft => "TTFT",
            Latency::Tpot => "TPOT",
        }
    }

    fn p95(self, class: &ClassReport) -> Option<f64> {
        match self {
            Latency::Ttft => class.p95_ttft_ms,
            Latency::Tpot => class.p95_tpot_ms,
        }
    }

    fn report_cutoff(self, class: &ClassReport) -> f64 {
        match self {
            Latency::Ttft => class.request_ttft_cutoff_ms,
            Latency::Tpot => class.request_tpot_cutoff_ms,
        }
    }

    fn gate_cutoff(self, slo: &ClassSlo) -> f64 {
        match self {
            Latency::Ttft => slo.ttft_cutoff_ms,
            Latency::Tpot => slo.tpot_cutoff_ms,
        }
    }
}

fn latency_chart(result: &BenchResult, latency: Latency) -> Chart {
    let series = class_series(result, |c| latency.p95(c));
    let guides = class_names(result)
        .iter()
        .enumerate()
        .filter_map(|(i, class)| {
            let ms = class_cutoff(result, class, latency)?;
            Some(Guide::Horizontal(
                format!("{class} cutoff {} ms", super::figures::rate(ms)),
                ms,
                color(i),
            ))
        })
        .collect();
    let name = latency.name();
    Chart {
        title: format!("P95 {name} per class vs offered rate"),
        y_desc: format!("P95 {name} (ms)"),
        series,
        guides,
        y_cap: None,
        legend: SeriesLabelPosition::UpperLeft,
    }
}

/// A class's cutoff: from the gate, else from the first report that carries the class.
fn class_cutoff(result: &BenchResult, class: &str, latency: Latency) -> Option<f64> {
    let from_gate = result
        .gate
        .classes
        .iter()
        .find(|c| c.name == class)
        .map(|c| latency.gate_cutoff(c));
    from_gate
        .or_else(|| {
            result.modes.iter().flat_map(|m| &m.points).find_map(|p| {
                p.report
                    .classes
                    .get(class)
                    .map(|c| latency.report_cutoff(c))
            })
        })
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// The classes in manifest order, or (without names) every class any report carries.
fn class_names(result: &BenchResult) -> Vec<String> {
    if !result.class_names.is_empty() {
        return result.class_names.clone();
    }
    let seen: BTreeSet<&String> = result
        .modes
        .iter()
        .flat_map(|m| &m.points)
        .flat_map(|p| p.report.classes.keys())
        .collect();
    seen.into_iter().cloned().collect()
}

/// One series per cache mode of `figure`; modes without a value are left out.
fn mode_series(result: &BenchResult, figure: impl Fn(&PointResult) -> Option<f64>) -> Vec<Series> {
    result
        .modes
        .iter()
        .enumerate()
        .filter_map(|(i, mode)| {
            let points = rate_means(mode, &result.gate, &figure);
            (!points.is_empty()).then(|| Series {
                label: mode_name(mode.cache).into(),
                points,
                color: color(i),
                dashed: i > 0,
            })
        })
        .collect()
}

/// One series per (cache mode, class) of a class figure; empty series are left out. The
/// colour follows the class; the label names both.
fn class_series(result: &BenchResult, figure: impl Fn(&ClassReport) -> Option<f64>) -> Vec<Series> {
    let classes = class_names(result);
    let mut series = Vec::new();
    for (m, mode) in result.modes.iter().enumerate() {
        for (c, class) in classes.iter().enumerate() {
            let points = rate_means(mode, &result.gate, |p| {
                p.report.classes.get(class).and_then(&figure)
            });
            if points.is_empty() {
                continue;
            }
            // Modes after the first take a lighter shade of the class's colour.
            let shade = if m == 0 {
                color(c)
            } else {
                lighter(color(c), m)
            };
            series.push(Series {
                label: format!("{} · {class}", mode_name(mode.cache)),
                points,
                color: shade,
                dashed: m > 0,
            });
        }
    }
    series
}

/// (offered, mean of `figure` over the rate's repeats) for every rate with a finite value.
fn rate_means(
    mode: &ModeResult,
    gate: &GateConfig,
    figure: impl Fn(&PointResult) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let rows = point_rows(mode, gate);
    rate_groups(&rows)
        .iter()
        .filter(|g| g.offered_rps.is_finite())
        .filter_map(|g| {
            let y = mean(g.rows.iter().filter_map(|r| figure(r.point)))?;
            Some((g.offered_rps, y))
        })
        .collect()
}

fn color(i: usize) -> RGBColor {
    let (r, g, b) = Palette99::COLORS[i % Palette99::COLORS.len()];
    RGBColor(r, g, b)
}

/// `c` mixed with white, more for a higher `step`.
fn lighter(c: RGBColor, step: usize) -> RGBColor {
    let t = (0.45 * step as f64).min(0.7);
    let mix = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * t).round() as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

/// The axes' upper ends: a margin above the largest value, never an empty range.
fn axis_ranges(chart: &Chart) -> (f64, f64) {
    let mut xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let guide_ys = chart.guides.iter().filter_map(|g| match g {
        Guide::Horizontal(_, y, _) => Some(*y),
        Guide::Diagonal(_) => None,
    });
    let top = |values: &mut dyn Iterator<Item = f64>| {
        values.filter(|v| v.is_finite()).fold(0.0_f64, f64::max)
    };
    let x_top = top(&mut xs);
    let mut y_top = top(&mut ys.chain(guide_ys));
    if chart.guides.iter().any(|g| matches!(g, Guide::Diagonal(_))) {
        // Completed can't exceed offered by much: share the scale so y = x is the diagonal.
        y_top = y_top.max(x_top);
    }
    let padded = |v: f64| {
        if v > 0.0 && (v * 1.1).is_finite() {
            v * 1.1
        } else {
            1.0
        }
    };
    let y_max = match chart.y_cap {
        Some(cap) => padded(y_top.max(cap)).min(cap * 1.05),
        None => padded(y_top),
    };
    (padded(x_top), y_max)
}

fn render_svg(chart: &Chart) -> io::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, chart).map_err(|e| io::Error::other(e.to_string()))?;
        root.present()
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(svg)
}

type DrawResult =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>>;

fn draw(root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>, chart: &Chart) -> DrawResult {
    root.fill(&WHITE)?;
    let (x_max, y_max) = axis_ranges(chart);
    let mut ctx = ChartBuilder::on(root)
        .caption(&chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    ctx.configure_mesh()
        .x_desc("offered requests/s")
        .y_desc(chart.y_desc.as_str())
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    for guide in &chart.guides {
        let (label, points, color) = match guide {
            Guide::Diagonal(label) => {
                let end = x_max.min(y_max);
                (label, vec![(0.0, 0.0), (end, end)], RGBColor(160, 160, 160))
            }
            Guide::Horizontal(label, y, color) => (label, vec![(0.0, *y), (x_max, *y)], *color),
        };
        let style = color.stroke_width(1);
        ctx.draw_series(DashedLineSeries::new(points, 8, 5, style))?
            .label(label.as_str())
            .legend(move |(x, y)| dashed_legend((x, y), style));
    }

    for series in &chart.series {
        let style = series.color.stroke_width(2);
        if series.dashed {
            ctx.draw_series(DashedLineSeries::new(series.points.clone(), 10, 4, style))?
                .label(series.label.as_str())
                .legend(move |(x, y)| dashed_legend((x, y), style));
        } else {
            ctx.draw_series(LineSeries::new(series.points.iter().copied(), style))?
                .label(series.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        }
        let marker = series.color.filled();
        ctx.draw_series(series.points.iter().map(|&p| Circle::new(p, 4, marker)))?;
    }

    if chart.series.is_empty() {
        ctx.draw_series(std::iter::once(Text::new(
            "no points measured",
            (x_max * 0.4, y_max * 0.5),
            ("sans-serif", 20),
        )))?;
    }

    if !(chart.series.is_empty() && chart.guides.is_empty()) {
        ctx.configure_series_labels()
            .position(chart.legend.clone())
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    Ok(())
}

/// A dashed legend sample.
fn dashed_legend(
    (x, y): (i32, i32),
    style: ShapeStyle,
) -> DashedPathElement<std::vec::IntoIter<(i32, i32)>, i32> {
    DashedPathElement::new(vec![(x, y), (x + 24, y)], 5, 3, style)
}
