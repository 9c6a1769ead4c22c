//! The HTTP endpoints: `/metrics` (Prometheus text format), `/healthz` (the process
//! serves), `/readyz` (the host can do its work).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::HostMetrics;
use crate::store::BoxFuture;

/// Whether the host is ready: `Err` says why not.
pub trait Readiness: Send + Sync + 'static {
    /// Checks now; answers within a request timeout.
    fn check(&self) -> BoxFuture<'_, Result<(), String>>;
}

/// Serves the endpoints on `listener` until the task is dropped or aborted.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<HostMetrics>,
    readiness: Arc<dyn Readiness>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors, say: the next accept may succeed.
            Err(e) => {
                tracing::warn!("metrics endpoint: accepting a connection: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (metrics, readiness) = (metrics.clone(), readiness.clone());
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let (metrics, readiness) = (metrics.clone(), readiness.clone());
            async move { Ok::<_, Infallible>(respond(&request, &metrics, readiness.as_ref()).await) }
        });
        tokio::spawn(async move {
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!("metrics endpoint: connection: {e}");
            }
        });
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

const PLAIN: &str = "text/plain; charset=utf-8";

async fn respond(
    request: &Request<Incoming>,
    metrics: &HostMetrics,
    readiness: &dyn Readiness,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            format!("{} {}: only GET\n", request.method(), request.uri().path()),
        );
    }
    match request.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            metrics.encode(),
        ),
        "/healthz" => text(StatusCode::OK, PLAIN, "ok\n".into()),
        "/readyz" => match readiness.check().await {
            Ok(()) => text(StatusCode::OK, PLAIN, "ready\n".into()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                PLAIN,
                format!("not ready: {why}\n"),
            ),
        },
        other => text(
            StatusCode::NOT_FOUND,
            PLAIN,
            format!("{other}: not found; /metrics, /healthz or /readyz\n"),
        ),
    }
}
