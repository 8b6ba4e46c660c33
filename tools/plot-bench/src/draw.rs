//! The two SVG plots. Text is written as SVG `<text>` elements (font-family "sans-serif") that
//! the viewer renders: plotters is built without a font feature, so it never opens a font file
//! and needs no fontconfig; its layout uses a width estimate per character instead of glyph
//! metrics, which is close enough for axis labels and the legend.
//!
//! Every line has a [`Look`]: its hue from the series' (van, mode, zero-copy), its dash pattern
//! from its place (`where`): the first place in the input solid, the others dashed.

use crate::data::{Cdf, SeriesKey, SizePoint};
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
use std::path::Path;

type DrawResult = Result<(), Box<dyn Error>>;

const PLOT_W: u32 = 960;
/// The legend panel's least width; wider when its longest label needs it (see `legend_width`).
const LEGEND_W: u32 = 300;
const MIN_H: u32 = 640;
const ROW_H: i32 = 22;
const LEGEND_TOP: i32 = 60;
const FONT: &str = "sans-serif";

/// matplotlib's "tab10": distinct on white; further series take plotters' 99-colour palette.
const TAB10: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

fn series_color(i: usize) -> RGBColor {
    match TAB10.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b),
        None => {
            let c = Palette99::pick(i).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

/// Dash patterns per place index, as (dash, gap) in pixels; `None`: solid. Beyond the fourth
/// place the patterns repeat.
const DASHES: [Option<(u32, u32)>; 4] = [None, Some((10, 6)), Some((3, 4)), Some((18, 5))];

/// How one line is drawn: its colour and dash pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Look {
    pub color: RGBColor,
    pub dash: Option<(u32, u32)>,
}

impl Look {
    /// The look of `key`'s lines: hue by the index of its (van, mode, zero-copy) among `keys`'
    /// distinct ones (in `keys`' order), dash by the index of its place in `places`.
    pub fn of(key: &SeriesKey, keys: &[SeriesKey], places: &[Option<String>]) -> Look {
        let mut kinds: Vec<(&str, &str, bool)> = Vec::new();
        for k in keys {
            if !kinds.contains(&k.kind()) {
                kinds.push(k.kind());
            }
        }
        let hue = kinds.iter().position(|k| *k == key.kind()).unwrap_or(0);
        let place = places.iter().position(|p| *p == key.place).unwrap_or(0);
        Look {
            color: series_color(hue),
            dash: DASHES[place % DASHES.len()],
        }
    }

    fn with_color(self, color: RGBColor) -> Look {
        Look { color, ..self }
    }

    fn style(&self, width: u32) -> ShapeStyle {
        self.color.stroke_width(width)
    }
}

/// Draws `points` on `chart` as a line in `look`, `width` pixels wide.
fn draw_line<DB: DrawingBackend, CT: CoordTranslate>(
    chart: &mut ChartContext<'_, DB, CT>,
    points: Vec<CT::From>,
    look: Look,
    width: u32,
) -> DrawResult
where
    CT::From: Clone + 'static,
    DB::ErrorType: 'static,
{
    match look.dash {
        None => {
            chart.draw_series(LineSeries::new(points, look.style(width)))?;
        }
        Some((dash, gap)) => {
            chart.draw_series(DashedLineSeries::new(points, dash, gap, look.style(width)))?;
        }
    }
    Ok(())
}

/// `c` lightened toward white (`t` < 0) or darkened toward black (`t` > 0), |t| <= 1.
fn shade(c: RGBColor, t: f64) -> RGBColor {
    let mix = |v: u8| -> u8 {
        let v = f64::from(v);
        let out = if t < 0.0 {
            v + (255.0 - v) * -t
        } else {
            v * (1.0 - t)
        };
        out.round().clamp(0.0, 255.0) as u8
    };
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

/// "1 kB", "20 MB", "4096 B": decimal SI units, as the bench's Gbit/s.
pub fn fmt_bytes(v: f64) -> String {
    let units = [(1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, unit) in units {
        if v >= scale {
            return format!("{} {unit}", trim(v / scale));
        }
    }
    format!("{} B", trim(v))
}

/// A number with at most 3 significant decimals and no trailing zeros: 0.05, 1, 2.5, 1000;
/// below 0.0001 in exponent form (2e-5), where 4 decimals would read 0.
pub fn trim(v: f64) -> String {
    if v != 0.0 && v.abs() < 1e-4 {
        return format!("{v:e}");
    }
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The values m × 10^k within `lo..=hi` (positive) for the mantissas `ms` (in 1..10), ascending:
/// a log axis's ticks. Computed from integers, so 10^k is exact and never listed twice.
pub fn log_points(lo: f64, hi: f64, ms: &[u32]) -> Vec<f64> {
    let mut out = Vec::new();
    if !(lo > 0.0 && hi >= lo && hi.is_finite()) {
        return out;
    }
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    for k in k0..=k1 {
        for &m in ms {
            let v = f64::from(m) * 10f64.powi(k);
            // Round off powi's last-bit error so labels read 0.3, not 0.30000000000000004.
            let v = format!("{v:.12e}").parse::<f64>().unwrap_or(v);
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
    }
    out
}

const LABELLED: [u32; 3] = [1, 2, 5];
const GRID: [u32; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];

/// The legend panel's width for these labels: the sample line, then about 7.5 px per character
/// of 15 px sans-serif (an estimate, as the viewer picks the font), at least `LEGEND_W`.
fn legend_width(labels: &[String]) -> u32 {
    let chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    LEGEND_W.max(u32::try_from(54 + chars * 15 / 2 + 16).unwrap_or(LEGEND_W))
}

fn canvas_height(rows: usize) -> u32 {
    let need = LEGEND_TOP + 40 + ROW_H * i32::try_from(rows).unwrap_or(i32::MAX / 64);
    MIN_H.max(u32::try_from(need).unwrap_or(MIN_H))
}

/// A legend panel's heading and rows: a line sample (with a dot if `dot`) and the label.
fn legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    heading: &[&str],
    rows: &[(Look, String)],
    dot: bool,
) -> DrawResult {
    let left = Pos::new(HPos::Left, VPos::Center);
    let mut y = LEGEND_TOP - ROW_H * i32::try_from(heading.len()).unwrap_or(0);
    for h in heading {
        area.draw(&Text::new(
            h.to_string(),
            (10, y),
            (FONT, 15).into_font().color(&BLACK).pos(left),
        ))?;
        y += ROW_H;
    }
    y += ROW_H / 2;
    for (look, label) in rows {
        let sample = vec![(12, y), (46, y)];
        match look.dash {
            None => area.draw(&PathElement::new(sample, look.style(3)))?,
            Some((dash, gap)) => {
                area.draw(&DashedPathElement::new(sample, dash, gap, look.style(3)))?
            }
        }
        if dot {
            area.draw(&Circle::new((29, y), 4, look.color.filled()))?;
        }
        area.draw(&Text::new(
            label.clone(),
            (54, y),
            (FONT, 15).into_font().color(&BLACK).pos(left),
        ))?;
        y += ROW_H;
    }
    Ok(())
}

/// The range of the positive `values`, widened 1.5× each side for a log axis; (0.001, 1) when
/// none is positive (every value 0: an empty-looking but valid plot).
fn padded_log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|&v| v > 0.0)
        .fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo.is_finite() && hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.001, 1.0)
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A white SVG canvas at `path` for a legend of `labels` and `rows` legend rows: the whole
/// canvas, the plot's area and the legend's.
fn canvas<'a>(
    path: &'a Path,
    labels: &[String],
    rows: usize,
) -> Result<(Area<'a>, Area<'a>, Area<'a>), Box<dyn Error>> {
    let h = canvas_height(rows);
    let w = PLOT_W + legend_width(labels);
    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot, side) = root.split_horizontally(PLOT_W);
    Ok((root, plot, side))
}

/// A chart on `plot` titled `title`, with the margins and label areas both plots use.
fn chart_builder<'a, 'b>(plot: &'a Area<'b>, title: &str) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(plot);
    b.caption(title, (FONT, 26).into_font())
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(72);
    b
}

/// The mesh style both plots share: fonts and grid lines.
fn mesh<'m, 'a, 'b, X: Ranged, Y: Ranged, DB: DrawingBackend>(
    m: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB> {
    m.axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .bold_line_style(BLACK.mix(0.15))
        .light_line_style(BLACK.mix(0.05))
}

/// One series of the goodput plot: a line through the medians, a small dot per run and a large
/// one per median; goodputs below `floor` (the axis' bottom) drawn at it.
fn draw_goodput_series<DB: DrawingBackend, CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'_, DB, CT>,
    points: &[SizePoint],
    look: Look,
    floor: f64,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let color = look.color;
    let at = |g: f64| g.max(floor);
    draw_line(
        chart,
        points
            .iter()
            .map(|p| (p.len as f64, at(p.median_gbps)))
            .collect(),
        look,
        2,
    )?;
    chart.draw_series(points.iter().flat_map(|p| {
        p.runs_gbps
            .iter()
            .map(move |&g| Circle::new((p.len as f64, at(g)), 2, color.mix(0.5).filled()))
    }))?;
    chart.draw_series(
        points
            .iter()
            .map(|p| Circle::new((p.len as f64, at(p.median_gbps)), 4, color.filled())),
    )?;
    Ok(())
}

/// How much to darken CDF `c` (−0.4 … 0.4 for [`shade`]): by its size's rank among its
/// series' sizes, ascending, so the smallest is light and the largest dark.
fn size_shade(cdfs: &[Cdf], c: &Cdf) -> f64 {
    let sizes: Vec<u64> = cdfs
        .iter()
        .filter(|o| o.key == c.key)
        .map(|o| o.len)
        .collect();
    let rank = sizes.iter().position(|&l| l == c.len).unwrap_or(0);
    if sizes.len() > 1 {
        -0.4 + 0.8 * rank as f64 / (sizes.len() - 1) as f64
    } else {
        0.0
    }
}

/// `goodput-vs-len.svg`: per series a line through the median goodput at each size and a dot
/// per run; both axes log scale (a goodput of 0 is drawn at the axis' bottom).
pub fn goodput_vs_len(
    path: &Path,
    series: &[(SeriesKey, Vec<SizePoint>)],
    places: &[Option<String>],
) -> DrawResult {
    let lens: Vec<f64> = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.len as f64))
        .collect();
    if lens.is_empty() {
        return Err("no points to draw".into());
    }
    let (lo, hi) = lens
        .iter()
        .fold((f64::INFINITY, 0f64), |(lo, hi), &l| (lo.min(l), hi.max(l)));
    let (ylo, yhi) = padded_log_range(
        series
            .iter()
            .flat_map(|(_, p)| p.iter().flat_map(|p| p.runs_gbps.iter().copied())),
    );
    let keys: Vec<SeriesKey> = series.iter().map(|(k, _)| k.clone()).collect();

    let labels: Vec<String> = series.iter().map(|(k, _)| k.to_string()).collect();
    let (root, plot, side) = canvas(path, &labels, series.len())?;
    let mut chart = chart_builder(&plot, "pslite-rs bench: goodput vs value size")
        .build_cartesian_2d(
            (lo / 1.6..hi * 1.6)
                .log_scale()
                .with_key_points(log_points(lo / 1.6, hi * 1.6, &LABELLED))
                .with_light_points(log_points(lo / 1.6, hi * 1.6, &GRID)),
            (ylo..yhi)
                .log_scale()
                .with_key_points(log_points(ylo, yhi, &LABELLED))
                .with_light_points(log_points(ylo, yhi, &GRID)),
        )?;
    mesh(&mut chart.configure_mesh())
        .x_desc("value size (bytes per value, log scale)")
        .y_desc("goodput (Gbit/s, log scale)")
        .x_label_formatter(&|v| fmt_bytes(*v))
        .y_label_formatter(&|v| trim(*v))
        .draw()?;

    let mut rows = Vec::new();
    for ((key, points), label) in series.iter().zip(labels) {
        let look = Look::of(key, &keys, places);
        draw_goodput_series(&mut chart, points, look, ylo)?;
        rows.push((look, label));
    }
    legend(
        &side,
        &[
            "line and large dots: median of runs",
            "small dots: one per run (and worker)",
        ],
        &rows,
        true,
    )?;
    root.present()?;
    Ok(())
}

/// `latency-cdf.svg`: one CDF per (series, size), hue and dashes per series as in the goodput
/// plot, darker for larger values; x log scale.
pub fn latency_cdf(
    path: &Path,
    cdfs: &[Cdf],
    series: &[SeriesKey],
    places: &[Option<String>],
) -> DrawResult {
    let (lo, hi) = padded_log_range(cdfs.iter().flat_map(|c| c.points.iter().map(|p| p.0)));

    let labels: Vec<String> = cdfs
        .iter()
        .map(|c| {
            let runs = if c.runs == 1 {
                String::new()
            } else {
                format!(" ({} runs)", c.runs)
            };
            c.key.label(&format!(" {} B{runs}", c.len))
        })
        .collect();
    let (root, plot, side) = canvas(path, &labels, cdfs.len() + 1)?;
    let mut chart = chart_builder(&plot, "pslite-rs bench: request latency CDF")
        .build_cartesian_2d(
            (lo..hi)
                .log_scale()
                .with_key_points(log_points(lo, hi, &LABELLED))
                .with_light_points(log_points(lo, hi, &GRID)),
            0f64..1f64,
        )?;
    mesh(&mut chart.configure_mesh())
        .x_desc("request latency (ms, log scale)")
        .y_desc("fraction of requests")
        .y_labels(11)
        .x_label_formatter(&|v| trim(*v))
        .y_label_formatter(&|v| format!("{v:.1}"))
        .draw()?;

    let mut rows = Vec::new();
    for (c, label) in cdfs.iter().zip(labels) {
        let look = Look::of(&c.key, series, places);
        let look = look.with_color(shade(look.color, size_shade(cdfs, c)));
        draw_line(
            &mut chart,
            c.points.iter().map(|&(ms, q)| (ms.max(lo), q)).collect(),
            look,
            2,
        )?;
        rows.push((look, label));
    }
    legend(
        &side,
        &["per group: the run with the", "median goodput"],
        &rows,
        false,
    )?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_bytes(4096.0), "4.1 kB");
        assert_eq!(fmt_bytes(1_000_000.0), "1 MB");
        assert_eq!(fmt_bytes(100.0), "100 B");
        assert_eq!(trim(0.05), "0.05");
        assert_eq!(trim(2.5), "2.5");
        assert_eq!(trim(1000.0), "1000");
        assert_eq!(trim(0.005), "0.005");
        assert_eq!(trim(2e-5), "2e-5");
        assert_eq!(trim(0.0), "0");
    }

    fn key(van: &str, mode: &str, place: Option<&str>) -> SeriesKey {
        SeriesKey {
            van: van.into(),
            mode: mode.into(),
            zero_copy: false,
            place: place.map(String::from),
        }
    }

    #[test]
    fn looks_hue_per_van_and_mode_dash_per_place() {
        let keys = [
            key("rdma", "pull", Some("guest")),
            key("zmq", "pull", Some("guest")),
            key("zmq", "pull", Some("loopback")),
            key("zmq", "pull", None),
        ];
        let places = [
            Some("loopback".to_string()),
            Some("guest".to_string()),
            None,
        ];
        let looks: Vec<Look> = keys.iter().map(|k| Look::of(k, &keys, &places)).collect();
        assert_eq!(looks[0].color, series_color(0));
        assert_eq!(looks[0].dash, DASHES[1]);
        // zmq pull: one hue, a different dash per place; the first place solid.
        assert!(looks[1..].iter().all(|l| l.color == series_color(1)));
        assert_eq!(
            [looks[1].dash, looks[2].dash, looks[3].dash],
            [DASHES[1], None, DASHES[2]]
        );
    }

    #[test]
    fn log_axis_points() {
        assert_eq!(
            log_points(0.15, 30.0, &LABELLED),
            [0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
        );
        assert_eq!(
            log_points(2560.0, 9000.0, &GRID),
            [3e3, 4e3, 5e3, 6e3, 7e3, 8e3, 9e3]
        );
        assert_eq!(log_points(0.03, 0.031, &LABELLED), Vec::<f64>::new());
        assert_eq!(log_points(0.0, 1.0, &LABELLED), Vec::<f64>::new());
        let p = log_points(1e-4, 1e4, &GRID);
        assert!(
            p.windows(2).all(|w| w[0] < w[1]),
            "ascending, no repeats: {p:?}"
        );
        assert!(p.contains(&0.3) && p.contains(&1e-4) && p.contains(&1e4));
    }

    #[test]
    fn shades() {
        let c = RGBColor(100, 100, 100);
        assert_eq!(shade(c, 0.0), c);
        assert_eq!(shade(c, -1.0), RGBColor(255, 255, 255));
        assert_eq!(shade(c, 1.0), RGBColor(0, 0, 0));
    }
}
