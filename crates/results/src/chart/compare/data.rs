//! The comparison chart's data: a chart per swept field and variant, a series per folder, and
//! what the panels ask of them (shares of the limit, where an OOM goes, how high the axes go).
//! `comparison::chart` fills it from a comparison.
use crate::chart::PeakPoint;
use crate::schema::Status;

/// The chart's data: one series per folder, for one variant of one swept field.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareSweep {
    pub title: String,
    pub subtitle: String,
    /// The swept key's last part: "depth".
    pub x_label: String,
    /// The variant, empty without variants; it goes into the file stem.
    pub variant: String,
    /// What a series is: a folder (`compare`) or a variant of one run.
    pub series_of: SeriesOf,
    pub series: Vec<CompareSeries>,
}

/// What the chart's lines are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesOf {
    /// Folders of the same experiment (`oomlab compare`): `compare_peak_vs_<key>[-<variant>]`.
    Folders,
    /// The variants of one run: `peak_vs_<key>-variants`.
    Variants,
}

impl SeriesOf {
    pub fn word(self) -> &'static str {
        match self {
            SeriesOf::Folders => "folder",
            SeriesOf::Variants => "variant",
        }
    }
}

/// One folder's (or variant's) sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareSeries {
    /// "A: Tesla T4, budget 15.90 GiB".
    pub label: String,
    /// What shares are of: the budget, or the capacity; 0: none, and no line drawn.
    pub limit: u64,
    /// "budget" or "capacity".
    pub limit_name: String,
    /// Sorted by the swept value.
    pub points: Vec<PeakPoint>,
}

impl CompareSeries {
    pub fn ok(&self) -> impl Iterator<Item = &PeakPoint> {
        self.points.iter().filter(|p| p.status.fitted())
    }

    pub(super) fn ooms(&self) -> impl Iterator<Item = &PeakPoint> {
        self.points.iter().filter(|p| p.status == Status::Oom)
    }

    /// Where an OOM cross goes, in bytes: at what it needed, else at the limit.
    pub(super) fn oom_marker(&self, p: &PeakPoint) -> u64 {
        p.oom_need.unwrap_or(self.limit)
    }

    pub(super) fn share(&self, bytes: u64) -> f64 {
        if self.limit == 0 {
            0.0
        } else {
            100.0 * bytes as f64 / self.limit as f64
        }
    }
}

impl CompareSweep {
    /// The limit every folder shares, when they all have the same (the same budget, say): then
    /// each share is the same fraction of the same bytes, the share panel would repeat the
    /// bytes panel, and only the bytes panel is drawn. None where the limits differ.
    pub fn shared_limit(&self) -> Option<u64> {
        let first = self.series.first()?.limit;
        self.series.iter().all(|s| s.limit == first).then_some(first)
    }

    /// What the shared limit is called: "budget" or "capacity" where every folder's is the
    /// same kind, else "limit".
    pub fn shared_limit_name(&self) -> &str {
        match self.series.first() {
            Some(s) if self.series.iter().all(|o| o.limit_name == s.limit_name) => &s.limit_name,
            _ => "limit",
        }
    }

    pub(super) fn xs(&self) -> Vec<f64> {
        self.series.iter().flat_map(|s| s.points.iter().map(|p| p.x)).collect()
    }

    /// The highest byte value drawn: peaks, OOM markers, limits.
    pub(super) fn top_bytes(&self) -> u64 {
        self.series
            .iter()
            .flat_map(|s| {
                let peaks = s.ok().map(|p| p.max_reserved.max(p.max_allocated));
                let ooms = s.ooms().map(|p| s.oom_marker(p));
                peaks.chain(ooms).chain((s.limit > 0).then_some(s.limit))
            })
            .max()
            .unwrap_or(0)
    }

    /// The highest share drawn, in percent, at least 100.
    pub fn top_share(&self) -> f64 {
        self.series
            .iter()
            .flat_map(|s| {
                let peaks = s.ok().map(|p| s.share(p.max_reserved));
                let ooms = s.ooms().map(|p| s.share(s.oom_marker(p)));
                peaks.chain(ooms).collect::<Vec<f64>>()
            })
            .fold(100.0, f64::max)
    }
}
