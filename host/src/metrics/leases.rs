//! The lease gauges, read from the trackers' own views at each scrape, so that the
//! guarantee left is as of the scrape and not of the last renewal.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::leadership::Leadership;

/// Each leadership tracker's view, by application. A tracker that ended (its unit stopped
/// or left) is forgotten at the next scrape.
#[derive(Debug, Default)]
pub(super) struct LeaseViews {
    views: Mutex<Vec<(String, watch::Receiver<Leadership>)>>,
}

/// One application's lease as this host sees it.
#[derive(Default)]
struct LeaseRow {
    held: bool,
    term: u64,
    remaining: f64,
}

impl LeaseViews {
    pub(super) fn watch(&self, application: &str, leadership: watch::Receiver<Leadership>) {
        self.views
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((application.to_string(), leadership));
    }

    fn rows(&self) -> BTreeMap<String, LeaseRow> {
        let now = Instant::now();
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        // A closed channel: its tracker's task ended.
        views.retain(|(_, rx)| rx.has_changed().is_ok());
        let mut rows: BTreeMap<String, LeaseRow> = BTreeMap::new();
        for (app, rx) in views.iter() {
            let row = rows.entry(app.clone()).or_default();
            if let Leadership::Leader {
                term,
                guarantee_until,
            } = *rx.borrow()
            {
                row.held = true;
                row.term = row.term.max(term);
                row.remaining = row
                    .remaining
                    .max(guarantee_until.saturating_duration_since(now).as_secs_f64());
            }
        }
        rows
    }
}

/// A lease gauge: its name, help, unit, and its value in a row.
type LeaseGauge = (
    &'static str,
    &'static str,
    Option<Unit>,
    fn(&LeaseRow) -> f64,
);

impl Collector for LeaseViews {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.rows();
        let gauges: [LeaseGauge; 3] = [
            (
                "charm_host_lease_held",
                "1 while a unit on this host holds the application's lease",
                None,
                |r| f64::from(u8::from(r.held)),
            ),
            (
                "charm_host_lease_term",
                "The term of the lease a unit on this host holds (0 when none does)",
                None,
                |r| r.term as f64,
            ),
            (
                "charm_host_lease_guarantee_remaining",
                "How much longer leadership is guaranteed to the unit on this host that holds the lease",
                Some(Unit::Seconds),
                |r| r.remaining,
            ),
        ];
        for (name, help, unit, value) in &gauges {
            let mut metric =
                encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
            for (app, row) in &rows {
                let labels = [("application", app.as_str())];
                ConstGauge::new(value(row)).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
