//! The standard `process_*` metrics (Prometheus' client guidelines), read from /proc at
//! each scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

#[derive(Debug)]
pub(super) struct ProcessCollector;

/// The figures of one scrape; a figure /proc does not give is left out.
#[derive(Default)]
struct ProcessFigures {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    start_time_seconds: Option<f64>,
    threads: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

fn read() -> ProcessFigures {
    let mut figures = ProcessFigures::default();
    let Ok(me) = procfs::process::Process::myself() else {
        return figures;
    };
    if let Ok(stat) = me.stat() {
        let ticks = procfs::ticks_per_second() as f64;
        figures.cpu_seconds = Some((stat.utime + stat.stime) as f64 / ticks);
        figures.resident_bytes = Some(stat.rss as f64 * procfs::page_size() as f64);
        figures.virtual_bytes = Some(stat.vsize as f64);
        figures.threads = Some(stat.num_threads as f64);
        if let Ok(boot) = procfs::boot_time_secs() {
            figures.start_time_seconds = Some(boot as f64 + stat.starttime as f64 / ticks);
        }
    }
    figures.open_fds = me.fd_count().ok().map(|n| n as f64);
    if let Ok(limits) = me.limits()
        && let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit
    {
        figures.max_fds = Some(max as f64);
    }
    figures
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let figures = read();
        if let Some(cpu) = figures.cpu_seconds {
            let metric = encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu).encode(metric)?;
        }
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size",
                Some(Unit::Bytes),
                figures.resident_bytes,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size",
                Some(Unit::Bytes),
                figures.virtual_bytes,
            ),
            (
                "process_start_time",
                "Start time of the process since the Unix epoch",
                Some(Unit::Seconds),
                figures.start_time_seconds,
            ),
            ("process_threads", "OS threads", None, figures.threads),
            (
                "process_open_fds",
                "Open file descriptors",
                None,
                figures.open_fds,
            ),
            (
                "process_max_fds",
                "The most file descriptors the process may open",
                None,
                figures.max_fds,
            ),
        ];
        for (name, help, unit, value) in &gauges {
            if let Some(value) = value {
                let metric =
                    encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
                ConstGauge::new(*value).encode(metric)?;
            }
        }
        Ok(())
    }
}
