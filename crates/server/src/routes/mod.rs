//! The HTTP application: the route table, path normalization, who may call ([`access`]: the API
//! key, the origin policy, JSON bodies only), request counting, the body limit ([`body`]: every
//! body is read whole before anything answers). Every error leaves in OpenAI's shape
//! ([`ApiError`]), the HTTP layer's own too ([`json_errors`]). The endpoints live by what they
//! serve: [`chat`] and [`completions`] (sharing [`generate`]), [`embeddings`] (and rerank),
//! [`tokenize`], [`models`]
//! (with health and metrics), [`page`] (the chat page and its assets).

mod access;
pub(crate) mod body;
mod chat;
mod compat;
mod completions;
mod embeddings;
mod gcp;
mod generate;
mod infill;
mod messages;
mod models;
mod native;
mod page;
mod props;
mod proxy;
mod responses;
mod slots;
mod tokenize;

pub(crate) use chat::prepare as prepare_chat;
pub(crate) use completions::prepare as prepare_completion;
pub(crate) use generate::{check_job, CheckedJob};
pub(crate) use tokenize::TEXT_ROUTES_AT_ONCE;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;

use crate::api::Fields;
use crate::error::ApiError;
use crate::{AppState, Loaded};

pub type App = Router;

pub fn app(state: Arc<AppState>) -> App {
    // One store of responses for both spellings of the route.
    let responses = responses::route();
    let mut api = Router::new();
    if state.options.webui {
        api = api
            .route("/", get(page::index))
            .route("/assets/{*path}", get(page::asset))
            .route("/manifest.webmanifest", get(page::manifest))
            .route("/_app/version.json", get(page::version));
    }
    api = api.route("/sw.js", get(page::service_worker));
    let api = api
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/responses", responses.clone())
        .route("/responses", responses)
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        // llama-server's native API and its un-prefixed OpenAI aliases.
        .route("/chat/completions", post(chat::chat_completions))
        .route("/completion", post(native::completion))
        .route("/completions", post(native::completion))
        .route("/infill", post(infill::infill))
        .route("/props", get(props::get_props).post(props::post_props))
        .route("/slots", get(slots::get_slots))
        .route("/slots/{id}", post(slots::post_slot))
        .route("/apply-template", post(props::apply_template))
        .route("/chat/completions/input_tokens", post(props::input_tokens))
        .route(
            "/v1/chat/completions/input_tokens",
            post(props::input_tokens),
        )
        .route("/models", get(models::list_models))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/rerank", post(embeddings::rerank))
        .route("/rerank", post(embeddings::rerank))
        .route("/v1/models", get(models::list_models))
        .route("/v1/models/{*id}", get(models::get_model))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/metrics", get(models::metrics))
        .route("/health", get(models::health))
        .route(
            "/cors-proxy",
            get(proxy::cors_proxy).post(proxy::cors_proxy),
        )
        .fallback(not_found)
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), guard))
        .layer(DefaultBodyLimit::max(state.options.max_body_bytes))
        .with_state(Arc::clone(&state));
    let api = match &state.options.gcp {
        Some(gcp) => gcp_routes(gcp, &state, api),
        None => api,
    };
    // Paths are normalized before routing: clients built with a base URL ending in '/' ask for
    // `/v1//models`, others add a trailing slash.
    Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(normalize)
            .service(api),
    )
}

/// Vertex AI's routes in front of the table: the prediction route sends each instance through
/// `api` (see [`gcp`]), the extra health route is `/health`'s; both behind the same checks.
fn gcp_routes(gcp: &crate::Gcp, state: &Arc<AppState>, api: Router) -> Router {
    let inner = api.clone();
    let mut outer = Router::new().route(
        &gcp.predict_route,
        post(move |req: Request| gcp::predict(inner.clone(), req)),
    );
    if let Some(path) = &gcp.health_route {
        let inner = api.clone();
        outer = outer.route(
            path,
            get(move |mut req: Request| {
                *req.uri_mut() = axum::http::Uri::from_static("/health");
                tower::ServiceExt::oneshot(inner.clone(), req)
            }),
        );
    }
    outer
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn_with_state(Arc::clone(state), guard))
        .layer(DefaultBodyLimit::max(state.options.max_body_bytes))
        .fallback_service(api)
}

fn normalize(mut req: Request) -> Request {
    let path = req.uri().path();
    let mut clean = String::with_capacity(path.len());
    for part in path.split('/').filter(|p| !p.is_empty()) {
        clean.push('/');
        clean.push_str(part);
    }
    if clean.is_empty() {
        clean.push('/');
    }
    if clean != path {
        let query = req
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        if let Ok(uri) = format!("{clean}{query}").parse() {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// The origin policy, the preflight, the body (read whole, up to the limit and within the
/// header timeout between its pieces), the API key (every route but `/health` and the page
/// itself) and request counting.
async fn guard(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let counted = path.starts_with("/v1/")
        || path.starts_with("/chat/")
        || path.starts_with("/completion")
        || path == "/infill"
        || path == "/apply-template"
        || path == "/tokenize"
        || path == "/detokenize"
        || path == "/rerank";
    if counted {
        state.metrics.requests.inc();
    }
    let response = match access::cross_origin(&state, req.headers()) {
        Err(refused) => refused.into_response(),
        Ok(origin) if req.method() == Method::OPTIONS => access::preflight(origin),
        Ok(origin) => {
            let allowed = access::authorized(&state, req.method(), &path, req.headers());
            // The text routes take their turn before their body is read: a waiting request holds
            // no memory (see `tokenize`).
            let _turn = if allowed && tokenize::is_text_route(&path) {
                match Arc::clone(&state.text_permits).acquire_owned().await {
                    Ok(turn) => Some(turn),
                    Err(_) => return ApiError::ShuttingDown.into_response(),
                }
            } else {
                None
            };
            let limit = if tokenize::is_text_route(&path) {
                state
                    .options
                    .max_body_bytes
                    .min(tokenize::TEXT_ROUTE_MAX_BYTES)
            } else {
                state.options.max_body_bytes
            };
            let read = body::read_whole(req, limit, state.options.header_timeout).await;
            let mut response = match read {
                Err(response) => response,
                Ok(req) if allowed => next.run(req).await,
                Ok(_) => ApiError::Unauthorized.into_response(),
            };
            access::allow_origin(&mut response, origin);
            response
        }
    };
    if counted && (response.status().is_client_error() || response.status().is_server_error()) {
        state.metrics.requests_failed.inc();
    }
    response
}

/// The fallback error layer: an error answer of the HTTP layer (axum's 405 for a method a route
/// does not take, its extractors' rejections) gets OpenAI's JSON shape like every answer of the
/// handlers, which already have it.
async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let error = if status == StatusCode::METHOD_NOT_ALLOWED {
        let allow = response
            .headers()
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        ApiError::MethodNotAllowed {
            method,
            path,
            allow,
        }
    } else {
        ApiError::Http {
            status: status.as_u16(),
            message: format!(
                "{} {path}: {}",
                method,
                status.canonical_reason().unwrap_or("error").to_lowercase()
            ),
        }
    };
    error.into_response()
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
}

/// The loaded model, or the error every model route answers until there is one: 503 while it
/// loads, 500 if it failed.
fn loaded(state: &AppState) -> Result<&Loaded, ApiError> {
    match state.loaded.get() {
        Some(l) => Ok(l),
        None => match state.load_error.get() {
            Some(err) => Err(ApiError::internal(format!(
                "the model failed to load: {err}"
            ))),
            None => Err(ApiError::Loading),
        },
    }
}

/// A request to a route that needs the model: its body as JSON, taken once the model is loaded
/// (503 while it loads), 415 unless declared JSON, 413 past the body limit, 400 for a body that is
/// not JSON.
struct ModelRequest {
    state: Arc<AppState>,
    body: Value,
}

impl FromRequest<Arc<AppState>> for ModelRequest {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        access::require_json(req.headers())?;
        let body = Bytes::from_request(req, state).await;
        let model = loaded(state)?;
        // Every route taking a model request needs the model (or its vocabulary): one that
        // slept is loaded again first, as llama-server does.
        state
            .sleep
            .wake(&model.jobs, || state.load_error.get().is_some())
            .await;
        Ok(ModelRequest {
            state: Arc::clone(state),
            body: json_body(body)?,
        })
    }
}

impl ModelRequest {
    /// The model (checked when the request was taken; once loaded it stays) and the body's
    /// fields (400 unless the body is an object).
    fn parts(&self) -> Result<(&Loaded, Fields<'_>), ApiError> {
        Ok((loaded(&self.state)?, Fields::new(&self.body)?))
    }
}

/// The body as JSON: 413 past the limit, 400 for anything that is not JSON.
fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge
        } else {
            ApiError::invalid("body", rejection.body_text())
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid("body", format!("the request body is not valid JSON: {e}")))
}
