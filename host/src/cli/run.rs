//! `run`: a host running the units of a model, deploying a bundle first if given one.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use charm_host::bundle::BundleError;
use charm_host::charm::{CharmRuntime, RuntimeConfig};
use charm_host::controller::{Controller, ControllerConfig, ControllerError};
use charm_host::leadership::LeadershipConfig;
use charm_host::metrics::HostMetrics;
use charm_host::store::faults::{FaultPlan, FaultyStore, WriteHistory};
use charm_host::store::{MeteredStore, OpenMode, Store, StoreError};

use super::bundle::{BundleArgs, RunBundleArgs};
use super::output::Format;
use super::status::print_status;
use super::store::StoreArgs;

/// `charm-host run [BUNDLE]`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub bundle: RunBundleArgs,
    /// Stop when no hook is queued or running and every application with units here
    /// has a live leader that has run leader-elected (a lease left by a killed host is
    /// waited out), and print the status.
    #[arg(long)]
    pub until_idle: bool,
    /// With --until-idle: give up (exit 1) if not idle after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Run agents only for these units (comma-separated: unit names such as `discourse/0`,
    /// application names, or globs such as `discourse/*`), so several hosts can share one
    /// store; the default is every unit, including units added while it runs.
    #[arg(long, value_delimiter = ',')]
    pub units: Vec<String>,
    /// Seconds a leadership lease is claimed for.
    #[arg(long, default_value_t = 15.0)]
    pub lease_duration: f64,
    /// Seconds between lease renewals.
    #[arg(long, default_value_t = 2.0)]
    pub renew_interval: f64,
    /// Longest seconds between retries of a lease claim; also how long one claim may
    /// take before it counts as unanswered.
    #[arg(long, default_value_t = 1.0)]
    pub retry_period: f64,
    /// Seconds of each lease not counted on, for clock drift and the renewal round trip.
    #[arg(long, default_value_t = 5.0)]
    pub drift_margin: f64,
    /// Seconds between update-status hooks on every unit this host runs (Juju's
    /// default: 5 minutes).
    #[arg(long, default_value_t = 300.0)]
    pub update_status_interval: f64,
    /// How many of this host's units run a hook at once, in the order they asked; the
    /// others wait without a thread. A step of a hook that takes over 10 ms gives its
    /// place up, so this bounds throughput, never correctness. The pool of sandboxes
    /// holds at least this many hooks (64 at least). Default: eight per core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub hooks_at_once: Option<u32>,
    /// Record this host's leader-only commits (leader data, pod spec), each call and
    /// answer with its term and the system clock's time, as JSON lines appended to
    /// FILE: an audit of the leadership fence, to check for linearizability.
    #[arg(long, value_name = "FILE")]
    pub write_history: Option<PathBuf>,
    /// Seconds one hook may run; a hook still running then fails ("exceeded its time
    /// limit") and is retried like any failed hook. A leader's hook is also bounded by
    /// its leadership guarantee.
    #[arg(long, default_value_t = charm_host::charm::DEFAULT_HOOK_TIMEOUT.as_secs_f64())]
    pub hook_timeout: f64,
    /// MiB of linear memory one hook may use; a hook that asks for more fails ("out of
    /// memory").
    #[arg(long, default_value_t = RuntimeConfig::default().memory_limit >> 20)]
    pub hook_memory: usize,
    /// Serve /metrics (Prometheus), /healthz and /readyz on this address: `HOST:PORT`,
    /// or `PORT` alone for 127.0.0.1. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// With an etcd store: compact etcd's history every this many seconds, keeping about
    /// that much of it (the model's hosts take turns; 300 is Kubernetes' choice). Off (0)
    /// by default: compaction is cluster-wide, dropping the old revisions of every key on
    /// that etcd, other models' and other programs' too, so prefer etcd's own
    /// --auto-compaction-retention, and use this only on an etcd the model has to itself.
    /// A host logged in as an etcd user other than root does not compact. An etcd that
    /// never compacts fills its quota and then refuses every write.
    #[arg(long, default_value_t = 0.0)]
    pub etcd_compaction_interval: f64,
}

impl RunArgs {
    /// Runs the host until interrupted, or until idle with `--until-idle`.
    pub fn run(self) -> Result<()> {
        let RunArgs {
            bundle,
            until_idle,
            timeout,
            format,
            mut store,
            units,
            lease_duration,
            renew_interval,
            retry_period,
            drift_margin,
            update_status_interval,
            hooks_at_once,
            write_history,
            hook_timeout,
            hook_memory,
            metrics_addr,
            etcd_compaction_interval,
        } = self;
        let leadership = LeadershipConfig {
            lease_duration: seconds("lease-duration", lease_duration)?,
            renew_interval: seconds("renew-interval", renew_interval)?,
            retry_period: seconds("retry-period", retry_period)?,
            drift_margin: seconds("drift-margin", drift_margin)?,
            request_timeout: seconds("retry-period", retry_period)?,
        };
        if leadership.validate().is_err() {
            bail!("{}", lease_flags_misfit(&leadership));
        }
        let compaction = seconds("etcd-compaction-interval", etcd_compaction_interval)?;
        let places = hooks_at_once
            .map_or_else(charm_host::admission::places_for_this_machine, |n| {
                n as usize
            });
        store.etcd_compaction = Some(compaction).filter(|every| !every.is_zero());
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(run(
            bundle.bundle(),
            RunOptions {
                until_idle: until_idle
                    .then(|| seconds("timeout", timeout))
                    .transpose()?,
                format,
                store,
                units,
                leadership,
                update_status_interval: seconds("update-status-interval", update_status_interval)?,
                hooks_at_once: places,
                write_history,
                metrics_addr: metrics_addr.as_deref().map(metrics_addr_of).transpose()?,
                runtime_config: RuntimeConfig {
                    hook_timeout: hook_timeout_arg(hook_timeout)?,
                    memory_limit: hook_memory_arg(hook_memory)?,
                    // Every admitted hook has a sandbox: none waits for one in its place.
                    max_concurrent_hooks: u32::try_from(places)
                        .unwrap_or(u32::MAX)
                        .max(RuntimeConfig::default().max_concurrent_hooks),
                    ..RuntimeConfig::default()
                },
            },
        ))
    }
}

fn seconds(name: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("--{name} {s}: not a duration in seconds"))
}

/// `--hook-timeout`: a positive number of seconds.
fn hook_timeout_arg(s: f64) -> Result<Duration> {
    let timeout = seconds("hook-timeout", s)?;
    if timeout.is_zero() {
        bail!("--hook-timeout {s}: must be more than 0 seconds");
    }
    Ok(timeout)
}

/// `--hook-memory`: MiB, at least 1 and within wasm32's 4 GiB.
fn hook_memory_arg(mib: usize) -> Result<usize> {
    if !(1..=4096).contains(&mib) {
        bail!("--hook-memory {mib}: must be from 1 to 4096 MiB");
    }
    Ok(mib << 20)
}

/// How `run` runs, from its flags.
struct RunOptions {
    /// With --until-idle: how long to wait for it.
    until_idle: Option<Duration>,
    format: Format,
    store: StoreArgs,
    units: Vec<String>,
    leadership: LeadershipConfig,
    update_status_interval: Duration,
    /// --hooks-at-once: how many units run a hook at once (default: eight per core).
    hooks_at_once: usize,
    write_history: Option<PathBuf>,
    metrics_addr: Option<SocketAddr>,
    /// The hooks' sandbox: --hook-timeout and --hook-memory.
    runtime_config: RuntimeConfig,
}

async fn run(bundle_args: Option<BundleArgs>, options: RunOptions) -> Result<()> {
    let RunOptions {
        until_idle,
        format,
        store,
        units,
        leadership,
        update_status_interval,
        hooks_at_once,
        write_history,
        metrics_addr,
        runtime_config,
    } = options;
    // Other hosts sharing a SQLite file queue hooks for our units unseen: look every half
    // second. etcd's watches wake the agents instead.
    let poll_interval = store.is_sqlite().then(|| Duration::from_millis(500));
    let margin = runtime_config.guarantee_margin;
    let runtime = CharmRuntime::new(runtime_config).map_err(anyhow::Error::from)?;
    // Served from the start: /healthz while the store is waited for, /readyz says why not.
    let observed = match metrics_addr {
        Some(addr) => Some(serve_metrics(addr, leadership.request_timeout).await?),
        None => None,
    };
    let metrics = observed.as_ref().map(|(metrics, _)| metrics.clone());
    // Everything is checked before anything is deployed.
    let bundle = bundle_args.map(|b| b.load(&runtime)).transpose()?;
    for warning in bundle.iter().flat_map(|b| &b.warnings) {
        tracing::warn!("{warning}");
    }
    if let (Some(metrics), Some(bundle)) = (&metrics, &bundle) {
        let loaded: BTreeMap<_, _> = bundle
            .applications
            .iter()
            .map(|a| (&a.charm_path, a.charm.loaded_from()))
            .collect();
        loaded
            .into_values()
            .for_each(|from| metrics.charm_loaded(from));
    }
    // A store that cannot be reached yet (etcd restarting, say) is waited for: the host
    // comes up with it rather than exit. With --until-idle, for --timeout at most.
    let mut waiting = StoreWait::new(until_idle);
    let request_timeout = leadership.request_timeout;
    let store = loop {
        // Only a bundle makes a new model: without one, a store that is not there is an
        // error, not an empty model to wait on.
        let mode = match bundle {
            Some(_) => OpenMode::Create,
            None => OpenMode::Existing,
        };
        match store.open(mode, request_timeout).await {
            Ok(store) => break store,
            Err(e) => waiting.retry(e).await?,
        }
    };
    let store: Arc<dyn Store> = match write_history {
        Some(path) => {
            let history = WriteHistory::to_file(&path)
                .with_context(|| format!("--write-history {}", path.display()))?;
            Arc::new(
                FaultyStore::new(store, FaultPlan::none(0), None)
                    .with_write_history(Arc::new(history)),
            )
        }
        None => store,
    };
    let store: Arc<dyn Store> = match &metrics {
        Some(metrics) => Arc::new(MeteredStore::new(store, metrics.store())),
        None => store,
    };
    let config = ControllerConfig {
        leadership,
        hosted_units: (!units.is_empty()).then_some(units),
        poll_interval,
        metrics: metrics.clone(),
        // Hosts sharing the store may select the same units: one agent runs each.
        ownership: true,
        hooks_at_once: Some(hooks_at_once),
        ..Default::default()
    };
    let controller = Arc::new(Controller::new(store.clone(), margin, config)?);
    // Deploying again resumes what an interrupted attempt did.
    if let Some(bundle) = &bundle {
        while let Err(e) = bundle.deploy(&controller).await {
            waiting.retry(e.into()).await?;
        }
        tracing::info!(
            applications = bundle.applications.len(),
            relations = bundle.relations.len(),
            "bundle deployed"
        );
    }
    let (adopted, first_look) = tokio::sync::oneshot::channel();
    let watching = tokio::spawn(watch_model(
        controller.clone(),
        runtime.clone(),
        update_status_interval,
        metrics,
        adopted,
    ));
    // The units of a model run without a bundle have their agents before anything waits
    // on them.
    let _ = first_look.await;
    if let Some((_, readiness)) = &observed {
        readiness.running(store.clone(), watching.abort_handle());
    }
    let progress = std::io::stderr().is_terminal();
    if let Some(timeout) = until_idle {
        let deadline = tokio::time::Instant::now() + timeout;
        // One wait throughout: it remembers the leases it has seen, to tell a live leader
        // on another host from a lease left by a killed one.
        let settled = controller.wait_settled();
        tokio::pin!(settled);
        loop {
            tokio::select! {
                _ = &mut settled => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    let pending = controller.pending();
                    let unsettled = controller.unsettled();
                    if progress {
                        match (pending, unsettled.first()) {
                            (0, Some(why)) => eprintln!("waiting for leadership: {why}"),
                            _ => eprintln!("running: {pending} hooks queued or running"),
                        }
                    }
                    if tokio::time::Instant::now() >= deadline {
                        print_status(&store, format).await?;
                        if pending == 0 && !unsettled.is_empty() {
                            bail!("not idle after {timeout:?}: leadership not settled: {}", unsettled.join("; "));
                        }
                        bail!("not idle after {timeout:?}: {pending} hooks still queued or running");
                    }
                }
            }
        }
    } else {
        if progress {
            eprintln!("running; Ctrl-C to stop");
        }
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = terminate.recv() => {}
        }
        // No agent starts from here on; leadership is handed over at once rather than
        // after the lease lapses.
        watching.abort();
        controller.release_leases().await;
    }
    watching.abort();
    let printed = print_status(&store, format).await;
    // A clean stop: the next host to run these units (or this one, run again) has them at
    // once, not after their leases lapse.
    controller.release_leases().await;
    printed
}

/// How often a running host looks for units added or removed while it runs.
const MODEL_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the host's agents in line with the model while it runs: units that operators add
/// (`add-unit`, `deploy`) get agents here if this host runs them; removed units' agents
/// stop. An application this host has no charm for is loaded from the module the store
/// keeps for it (from its record's path, for one deployed before the store kept modules).
/// Every `update_status`, update-status is queued on the units this host runs.
async fn watch_model(
    controller: Arc<Controller>,
    runtime: CharmRuntime,
    update_status: Duration,
    metrics: Option<Arc<HostMetrics>>,
    adopted: tokio::sync::oneshot::Sender<()>,
) {
    let mut adopted = Some(adopted);
    let mut status_due = tokio::time::Instant::now() + update_status;
    let unloadable = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let load = move |app: &charm_host::model::ApplicationRecord, module: Option<&[u8]>| {
        let path = std::path::Path::new(&app.charm);
        let loaded = match module {
            Some(bytes) => runtime.load(path, bytes),
            None => runtime.load_file(path),
        };
        match loaded {
            Ok(charm) => {
                if let Some(metrics) = &metrics {
                    metrics.charm_loaded(charm.loaded_from());
                }
                Some(Arc::new(charm) as Arc<dyn charm_host::agent::HookExecutor>)
            }
            Err(e) => {
                // Said once per application, not every second.
                if unloadable
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(app.name.clone())
                {
                    tracing::warn!(app = %app.name, "cannot load its charm here: {e}");
                }
                None
            }
        }
    };
    loop {
        match controller.adopt(&load).await {
            Ok(started) if !started.is_empty() => {
                tracing::info!(?started, "started agents for new units");
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("looking for new units: {e}"),
        }
        if let Some(adopted) = adopted.take() {
            let _ = adopted.send(());
        }
        tokio::time::sleep(MODEL_WATCH_INTERVAL).await;
        if tokio::time::Instant::now() >= status_due {
            status_due += update_status;
            let fired = controller.update_status().await;
            tracing::debug!(?fired, "update-status queued");
        }
    }
}

/// `--metrics-addr`'s address: `HOST:PORT`, or a port alone (`9464`, `:9464`) for loopback.
fn metrics_addr_of(text: &str) -> Result<SocketAddr> {
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    use std::net::ToSocketAddrs as _;
    text.to_socket_addrs()
        .with_context(|| {
            format!("--metrics-addr {text}: not HOST:PORT or PORT (such as 127.0.0.1:9464)")
        })?
        .next()
        .with_context(|| format!("--metrics-addr {text}: names no address"))
}

/// Starts serving /metrics, /healthz and /readyz on `addr`; /readyz is unready until the
/// host runs ([`HostReadiness::running`]).
async fn serve_metrics(
    addr: SocketAddr,
    request_timeout: Duration,
) -> Result<(Arc<HostMetrics>, Arc<HostReadiness>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-addr {addr}: cannot listen"))?;
    let metrics = HostMetrics::new();
    let readiness = Arc::new(HostReadiness {
        running: std::sync::OnceLock::new(),
        request_timeout,
    });
    tokio::spawn(charm_host::metrics::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
    ));
    tracing::info!("serving /metrics, /healthz and /readyz on http://{addr}");
    Ok((metrics, readiness))
}

/// Ready: the bundle is deployed, the task that keeps the agents in line with the model
/// runs, and the store answers within a request timeout.
struct HostReadiness {
    running: std::sync::OnceLock<(Arc<dyn Store>, tokio::task::AbortHandle)>,
    request_timeout: Duration,
}

impl HostReadiness {
    /// The host runs: its agents started on `store`; `watching` keeps them in line.
    fn running(&self, store: Arc<dyn Store>, watching: tokio::task::AbortHandle) {
        let _ = self.running.set((store, watching));
    }
}

impl charm_host::metrics::Readiness for HostReadiness {
    fn check(&self) -> charm_host::store::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let Some((store, watching)) = self.running.get() else {
                return Err("the bundle is not deployed yet".into());
            };
            if watching.is_finished() {
                return Err("the agents are no longer kept in line with the model".into());
            }
            match tokio::time::timeout(self.request_timeout, store.applications()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("the store: {e}")),
                Err(_) => Err(format!(
                    "the store did not answer within {:?}",
                    self.request_timeout
                )),
            }
        })
    }
}

/// Retries while the store is unavailable, with a growing pause, until an optional limit.
struct StoreWait {
    started: tokio::time::Instant,
    limit: Option<Duration>,
    pause: Duration,
}

impl StoreWait {
    fn new(limit: Option<Duration>) -> Self {
        StoreWait {
            started: tokio::time::Instant::now(),
            limit,
            pause: Duration::from_millis(250),
        }
    }

    /// Returns after a pause if `error` is the store being unavailable and time is left;
    /// returns `error` otherwise.
    async fn retry(&mut self, error: anyhow::Error) -> Result<()> {
        let unavailable = error.chain().any(|cause| {
            matches!(
                cause.downcast_ref::<StoreError>(),
                Some(StoreError::Unavailable(_))
            ) || matches!(
                cause.downcast_ref::<ControllerError>(),
                Some(ControllerError::Store(StoreError::Unavailable(_)))
            ) || matches!(
                cause.downcast_ref::<BundleError>(),
                Some(BundleError::Deploy(ControllerError::Store(
                    StoreError::Unavailable(_)
                )))
            )
        });
        let out_of_time = self
            .limit
            .is_some_and(|limit| self.started.elapsed() + self.pause > limit);
        if !unavailable || out_of_time {
            return Err(error);
        }
        tracing::warn!("{error:#}; retrying in {:?}", self.pause);
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Duration::from_secs(5));
        Ok(())
    }
}

/// What is wrong with lease flags that do not fit together, every constraint they break
/// named by its flags (checked as [`LeadershipConfig::validate`] checks them), and a set
/// that fits for the same lease (the defaults' proportions).
fn lease_flags_misfit(config: &LeadershipConfig) -> String {
    let secs = |d: Duration| d.as_secs_f64();
    let (lease, renew, margin) = (
        secs(config.lease_duration),
        secs(config.renew_interval),
        secs(config.drift_margin),
    );
    let mut broken = Vec::new();
    if config.drift_margin >= config.lease_duration {
        broken.push(format!(
            "--drift-margin {margin} must be less than --lease-duration {lease}"
        ));
    }
    if config.renew_interval >= config.guarantee() {
        broken.push(format!(
            "--renew-interval {renew} must be less than the guarantee, --lease-duration minus --drift-margin ({})",
            secs(config.guarantee())
        ));
    }
    let round = |x: f64| (x * 100.0).round() / 100.0;
    format!(
        "the lease flags do not fit together: {}; for a {lease} s lease, for instance: --lease-duration {lease} --drift-margin {} --renew-interval {}",
        broken.join("; "),
        round(lease / 3.0),
        round(lease * 2.0 / 15.0)
    )
}
